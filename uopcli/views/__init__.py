"""Views of a graph: graphviz.py (the `render` command: dot, svg, png) and html/ (the offline
HTML viewer: render --format html, view)."""
