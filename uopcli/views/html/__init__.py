"""The offline HTML viewer: one self-contained page that opens a graph of any size one level
of groups at a time (see groups.py for the levels, layout.py for graphviz, page.py for the file)."""
