"""Backend-neutral runtime: load a loadable, validate it, run it (numpy only)."""

from pydla.engine.module import LoadedModule, load

__all__ = ["LoadedModule", "load"]
