"""pydla's intermediate representation: a fixed-shape, topologically ordered graph."""

from pydla.ir.graph import Graph, Node, Value
from pydla.ir.verifier import verify

__all__ = ["Graph", "Node", "Value", "verify"]
