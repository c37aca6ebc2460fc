"""Backends: what turns a Graph into values. numpy/ is the fast evaluator (a compiler of
passes, `uopcli.evaluate`), reference.py the plain op-by-op one it is checked against."""
