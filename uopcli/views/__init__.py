"""Views of a graph: graphviz pictures and the offline HTML viewer (views.html)."""
