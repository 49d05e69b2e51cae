"""Fuse chains of elementwise ops and activations into one Pointwise layer."""

from __future__ import annotations

from pydla.ir import Graph, Node
from pydla.ops import EPILOGUE_HOSTS
from pydla.passes.base import PassContext
from pydla.passes.patterns import RewritePass
from pydla.passes.programs import is_pointwise, splice, to_program
from pydla.passes.rewrite import Uses, merge_provenance, place_at


class FusePointwise(RewritePass):
    name = "fuse_pointwise"
    ensures = ("pointwise_fused",)

    def rewrite(self, graph: Graph, uses: Uses, consumer: Node, ctx: PassContext) -> bool:
        if not is_pointwise(consumer):
            return False
        for v in consumer.inputs:
            producer = v.producer if v is not None else None
            if producer is None or not is_pointwise(producer) or producer not in graph.nodes:
                continue
            if uses.only_user(producer.outputs[0]) is not consumer:
                continue
            inputs, steps = splice(to_program(producer), to_program(consumer),
                                   producer.outputs[0])
            fused = Node("Pointwise", graph.unique_node_name(consumer.name), inputs,
                         list(consumer.outputs), {"program": steps})
            fused.fused_from = []
            merge_provenance(fused, producer, consumer)
            place_at(graph, fused, consumer, [producer])
            ctx.note(f"fuse_pointwise: {producer.op} {producer.name!r} + {consumer.op} "
                     f"{consumer.name!r} -> Pointwise {fused.name!r} ({len(steps)} steps)")
            return True
        return False


class FuseEpilogue(RewritePass):
    """Conv/ConvTranspose/Gemm/MatMul followed by pointwise work (bias, activation, residual
    Add…) becomes one layer whose kernel runs the pointwise work as its epilogue."""

    name = "fuse_epilogue"
    ensures = ("epilogues_fused",)

    def rewrite(self, graph: Graph, uses: Uses, consumer: Node, ctx: PassContext) -> bool:
        if not is_pointwise(consumer):
            return False
        hosts = [v.producer for v in consumer.inputs if v is not None and v.producer
                 is not None and v.producer.op in EPILOGUE_HOSTS
                 and len(v.producer.outputs) == 1
                 and v.shape == consumer.outputs[0].shape
                 and v.dtype == consumer.outputs[0].dtype
                 and uses.only_user(v) is consumer]
        if not hosts:
            return False
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        host = max(hosts, key=lambda n: order[id(n)])  # the later one: the other is ready
        self._fuse(graph, host, consumer)
        ctx.note(f"fuse_epilogue: {consumer.op} {consumer.name!r} runs as the epilogue of "
                 f"{host.op} {host.name!r}")
        return True

    @staticmethod
    def _fuse(graph: Graph, host: Node, consumer: Node) -> None:
        out = host.outputs[0]
        epi = host.attrs.get("epilogue")
        n_own = len(host.inputs) - (int(epi["inputs"]) if epi else 0)
        own = host.inputs[:n_own]
        current = ([out, *host.inputs[n_own:]], list(epi["program"])) if epi else ([out], [])
        inputs, steps = splice(current, to_program(consumer), out, head=[out])
        extras = inputs[1:]
        result = consumer.outputs[0]
        host.inputs = list(own) + extras
        host.attrs = {**host.attrs, "epilogue": {"program": steps, "inputs": len(extras)}}
        host.outputs = [result]
        result.producer = host
        merge_provenance(host, consumer)
        place_at(graph, host, consumer, [])
