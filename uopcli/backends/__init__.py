"""Backends that run a graph: numpy/, the evaluator package (`uopcli.evaluate`)."""
