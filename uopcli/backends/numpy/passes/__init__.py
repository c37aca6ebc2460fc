"""The compiler's passes over a Program, one module each, run in this order (compiler.PASSES):

1. contractions   REDUCE ADD over products -> one matmul/einsum step
2. strided_views  movement chains -> one strided view; sums over padded chains -> scatter-adds
3. scatter_layout a contraction read by a scatter-add lays its result out for the scatter
4. frees          each step drops the registers it reads last
5. in_place       elementwise steps write into a source array dying with them
6. view_order     elementwise steps over overlapping windows run in memory order
7. broadcast      elementwise steps over broadcast sources run once along the broadcast axes

Each module's docstring says what it needs from the passes before it.
"""
