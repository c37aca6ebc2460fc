"""Views of a graph: graphviz.py (the `render` command: dot, svg, png)."""
