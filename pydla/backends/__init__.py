"""Execution backends behind one small interface (``pydla.backends.base``)."""
