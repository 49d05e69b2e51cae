"""The one validating reader of loadables (runtime side; numpy and the stdlib only).

Every offset, size, count, dtype, op name and tensor reference is checked before anything
is used; a malformed file raises LoadableError naming the byte offset and the reason. The
weights stay where they are (zero-copy views of the caller's buffer).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection
from typing import Any

import numpy as np

from pydla import formats
from pydla.dtypes import DType
from pydla.errors import IncompatibleLoadableError, LoadableError
from pydla.loadable.format import (
    ALIGNMENT,
    DIGEST_OFFSET,
    DIGEST_SIZE,
    HEADER,
    HEADER_FIELDS,
    HEADER_SIZE,
    MAGIC,
    MAX_ARENA_BYTES,
    MAX_DIM,
    MAX_PROFILES,
    MAX_RANK,
    MAX_TENSORS,
    TENSOR_KINDS,
    VERSION_MAJOR,
    align,
)
from pydla.loadable.program import (
    ALIAS_KINDS,
    RESHAPES,
    InputRange,
    IOTensor,
    LayerInfo,
    Profile,
    ProfileSet,
    Program,
    ProgramBody,
    TensorInfo,
)
from pydla.loadable.rules_control import check_loop_bodies
from pydla.loadable.validate import check_layer

_MAX_ATTR_DEPTH = 6


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return MAX_ARENA_BYTES


def _as_memoryview(data: Any) -> memoryview:
    try:
        mv = memoryview(data)
    except TypeError:
        raise LoadableError(0, f"a loadable must be a buffer, not {type(data).__name__}") from None
    if not mv.contiguous:
        raise LoadableError(0, "the loadable buffer is not contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def read_loadable(data: Any, known_ops: Collection[str] | None = None) -> Program:
    """Validate ``data`` (bytes, bytearray, memoryview, mmap, numpy uint8) into a Program.

    ``known_ops`` is the op set of the backend that will run it; an unknown op is refused.
    """
    mv = _as_memoryview(data)
    size = len(mv)
    if size < HEADER_SIZE:
        raise LoadableError(size, f"file is {size} bytes, shorter than the {HEADER_SIZE}-byte "
                            "header")
    (magic, major, minor, header_size, file_size, meta_offset, meta_size, weights_offset,
     weights_size, flags, reserved) = HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise LoadableError(0, f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if major > VERSION_MAJOR:
        raise IncompatibleLoadableError(
            HEADER_FIELDS["version_major"],
            f"format version {major}.{minor} is newer than this runtime's {VERSION_MAJOR}.x")
    if major != VERSION_MAJOR:
        raise LoadableError(HEADER_FIELDS["version_major"],
                            f"unknown format version {major}.{minor}")

    def field_error(name: str, reason: str) -> LoadableError:
        return LoadableError(HEADER_FIELDS[name], f"header field {name}: {reason}")

    if header_size != HEADER_SIZE:
        raise field_error("header_size", f"{header_size}, expected {HEADER_SIZE}")
    if file_size != size:
        raise field_error("file_size", f"says {file_size} bytes, the buffer holds {size}")
    if flags != 0 or reserved != 0:
        raise field_error("flags", f"unknown flags {flags:#x}/{reserved:#x}")
    if meta_offset != HEADER_SIZE:
        raise field_error("meta_offset", f"{meta_offset}, expected {HEADER_SIZE}")
    if meta_size == 0 or meta_offset + meta_size > size:
        raise field_error("meta_size", f"{meta_size} bytes at {meta_offset} exceed the file")
    if weights_offset % ALIGNMENT or weights_offset < meta_offset + meta_size:
        raise field_error("weights_offset", f"{weights_offset} is misaligned or overlaps metadata")
    if weights_offset + weights_size != size:
        raise field_error("weights_size", f"{weights_size} bytes at {weights_offset} do not end "
                          f"the {size}-byte file")
    if any(mv[DIGEST_OFFSET + DIGEST_SIZE:HEADER_SIZE]):
        raise LoadableError(DIGEST_OFFSET + DIGEST_SIZE, "reserved header bytes are not zero")
    h = hashlib.sha256(mv[:DIGEST_OFFSET])
    h.update(mv[HEADER_SIZE:])
    if h.digest() != bytes(mv[DIGEST_OFFSET:DIGEST_OFFSET + DIGEST_SIZE]):
        raise LoadableError(DIGEST_OFFSET, "digest mismatch: the file is corrupted")

    try:
        text = bytes(mv[meta_offset:meta_offset + meta_size]).decode("utf-8")
        meta = json.loads(text)
    except UnicodeDecodeError as e:
        raise LoadableError(meta_offset + e.start, "metadata is not UTF-8") from None
    except json.JSONDecodeError as e:
        raise LoadableError(meta_offset + e.pos, f"metadata is not JSON: {e.msg}") from None
    except RecursionError:
        raise LoadableError(meta_offset, "metadata nests too deeply") from None
    weights = mv[weights_offset:]
    return _Validator(meta, meta_offset, weights_offset, weights, known_ops).loadable(major, minor)


class _Validator:
    def __init__(self, meta: Any, meta_offset: int, weights_offset: int, weights: memoryview,
                 known_ops: Collection[str] | None) -> None:
        self.meta = meta
        self.meta_offset = meta_offset
        self.weights_offset = weights_offset
        self.weights = weights
        self.known_ops = known_ops

    def fail(self, path: str, reason: str, offset: int | None = None) -> LoadableError:
        return LoadableError(self.meta_offset if offset is None else offset,
                             f"metadata {path}: {reason}")

    def get(self, obj: Any, key: str, kind: type | tuple[type, ...], path: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(path, f"missing field {key!r}")
        value = obj[key]
        if isinstance(value, bool) and kind is int:
            raise self.fail(f"{path}.{key}", "expected an integer")
        if not isinstance(value, kind):
            raise self.fail(f"{path}.{key}", f"expected {getattr(kind, '__name__', kind)}, "
                            f"got {type(value).__name__}")
        return value

    def count(self, obj: Any, key: str, path: str, limit: int = MAX_TENSORS) -> list[Any]:
        items = self.get(obj, key, list, path)
        if len(items) > limit:
            raise self.fail(f"{path}.{key}", f"{len(items)} entries exceed the limit {limit}")
        return items

    def int_in(self, obj: Any, key: str, path: str, lo: int, hi: int) -> int:
        v = self.get(obj, key, int, path)
        if not lo <= v <= hi:
            raise self.fail(f"{path}.{key}", f"{v} is outside [{lo}, {hi}]")
        return v

    def program(self, meta: Any, prefix: str = "") -> ProgramBody:
        """Validate one executable program: ``meta`` holds its tensors, layers, inputs,
        outputs and arena_bytes; errors name ``prefix`` + the field's path (``prefix`` is
        empty for the top level, else ends in a dot: ``"profiles[1]."``).

        The top-level program, each optimization profile's plan and any sub-program pass
        through here, so none is checked by a weaker path.
        """
        where = prefix.rstrip(".")  # the object's own path, for its fields' errors
        if not isinstance(meta, dict):
            raise self.fail(where, "expected an object")
        arena = self.int_in(meta, "arena_bytes", where, 0, MAX_ARENA_BYTES)
        tensors = tuple(self.tensor(i, t, arena, prefix)
                        for i, t in enumerate(self.count(meta, "tensors", where)))
        layers = tuple(self.layer(i, lay, tensors, prefix)
                       for i, lay in enumerate(self.count(meta, "layers", where)))
        inputs = tuple(self.io(i, e, tensors, "input", prefix)
                       for i, e in enumerate(self.count(meta, "inputs", where)))
        outputs = tuple(self.io(i, e, tensors, "output", prefix)
                        for i, e in enumerate(self.count(meta, "outputs", where)))
        ends = [t.offset + t.nbytes for t in tensors if t.kind != "weight"]
        if arena > align(max(ends, default=0)):
            raise self.fail(f"{prefix}arena_bytes", f"{arena} is larger than its tensors need "
                            f"({max(ends, default=0)})")
        if arena > _physical_memory():
            raise self.fail(f"{prefix}arena_bytes", f"{arena} bytes exceed this machine's "
                            "memory")
        self.dataflow(tensors, layers, inputs, outputs, prefix)
        self.aliases(tensors, layers, prefix)
        self.arena_overlaps(tensors, layers, prefix)
        for lay in layers:  # each layer is the computation its kernels assume
            check_layer(lay, tensors, self.meta_offset, prefix)
        return ProgramBody(tensors, layers, inputs, outputs, arena)

    def loadable(self, major: int, minor: int) -> Program:
        meta = self.meta
        if not isinstance(meta, dict):
            raise self.fail("", "top level is not an object")
        producer = self.get(meta, "producer", dict, "")
        target = self.get(meta, "target", dict, "")
        build = meta.get("build", {})
        if not isinstance(build, dict):
            raise self.fail("build", "expected an object")
        body = self.program(meta)
        # Loop bodies (format 1.2): each checked as the main program is, then tied to the
        # Loop layers that run it.
        subprograms = tuple(self.program(s, f"subprograms[{k}].") for k, s in
                            enumerate(self.count(meta, "subprograms", "", 4096))
                            ) if "subprograms" in meta else ()
        check_loop_bodies(body.layers, body.tensors, subprograms, self.meta_offset)
        return Program(version=(major, minor), producer=producer, target=target,
                       tensors=body.tensors, layers=body.layers, inputs=body.inputs,
                       outputs=body.outputs, arena_bytes=body.arena_bytes,
                       weights=self.weights, build=build, subprograms=subprograms,
                       profiles=self.profile_set(body))

    def profile_set(self, main: ProgramBody) -> ProfileSet | None:
        """The optimization profile (format 1.2): each plan a full program, checked as the
        top level is, whose inputs and outputs are the top level's at the plan's shapes."""
        meta = self.meta
        if "shape_range" not in meta and "profiles" not in meta:
            return None
        rng = self.get(meta, "shape_range", dict, "")
        pad_batch = self.get(rng, "pad_batch", bool, "shape_range")
        entries = self.count(rng, "inputs", "shape_range", len(main.inputs))
        if len(entries) != len(main.inputs):
            raise self.fail("shape_range.inputs", f"{len(entries)} ranges for "
                            f"{len(main.inputs)} inputs")
        ranges = tuple(self.input_range(k, e, main.tensors[io.tensor])
                       for k, (e, io) in enumerate(zip(entries, main.inputs)))
        items = self.count(meta, "profiles", "", MAX_PROFILES)
        if not items:
            raise self.fail("profiles", "no profile: profile 0 is the top-level program")
        first = items[0]
        if not isinstance(first, dict) or set(first) != {"shapes"}:
            raise self.fail("profiles[0]", "profile 0 is the top-level program: it holds its "
                            "shapes only")
        profiles = [Profile(self.plan_shapes(first, ranges, "profiles[0]"), None)]
        if profiles[0].shapes != tuple(main.tensors[io.tensor].shape for io in main.inputs):
            raise self.fail("profiles[0].shapes", "differ from the top-level inputs' shapes")
        for k, item in enumerate(items[1:], 1):
            path = f"profiles[{k}]"
            shapes = self.plan_shapes(item, ranges, path)
            body = self.program(item, f"{path}.")
            loops = [lay.index for lay in body.layers if lay.op == "Loop"]
            if loops:  # a Loop's body is a top-level sub-program, made for profile 0's shapes
                raise self.fail(f"{path}.layers[{loops[0]}]", "a Loop layer in a profile "
                                "other than 0")
            self.same_io(main, body, shapes, path)
            profiles.append(Profile(shapes, body))
        seen: dict[tuple[tuple[int, ...], ...], int] = {}
        for k, prof in enumerate(profiles):
            if prof.shapes in seen:
                raise self.fail(f"profiles[{k}].shapes", f"repeat profiles[{seen[prof.shapes]}]")
            seen[prof.shapes] = k
        if pad_batch:
            self.batch_padding(ranges, profiles, main)
        return ProfileSet(ranges, pad_batch, tuple(profiles))

    def input_range(self, k: int, e: Any, t: TensorInfo) -> InputRange:
        path = f"shape_range.inputs[{k}]"
        name = self.get(e, "name", str, path)
        if name != t.name:
            raise self.fail(f"{path}.name", f"{name!r}, the input is {t.name!r}")
        lo, opt, hi = (self.dims(e, key, path, len(t.shape)) for key in ("min", "opt", "max"))
        if not all(a <= b <= c for a, b, c in zip(lo, opt, hi)):
            raise self.fail(path, f"input {name!r}: min {list(lo)} <= opt {list(opt)} <= "
                            f"max {list(hi)} does not hold")
        if opt != t.shape:
            raise self.fail(f"{path}.opt", f"{list(opt)} is not the top-level shape "
                            f"{list(t.shape)} of {name!r}")
        return InputRange(name, lo, opt, hi)

    def dims(self, obj: Any, key: str, path: str, rank: int) -> tuple[int, ...]:
        values = self.get(obj, key, list, path)
        if len(values) != rank or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM
                for d in values):
            raise self.fail(f"{path}.{key}", f"{values!r} is not {rank} dimensions in "
                            f"[0, {MAX_DIM}]")
        return tuple(values)

    def plan_shapes(self, item: Any, ranges: tuple[InputRange, ...], path: str
                    ) -> tuple[tuple[int, ...], ...]:
        shapes = self.count(item, "shapes", path, len(ranges))
        if len(shapes) != len(ranges):
            raise self.fail(f"{path}.shapes", f"{len(shapes)} shapes for {len(ranges)} inputs")
        out = []
        for j, (values, r) in enumerate(zip(shapes, ranges)):
            if not isinstance(values, list) or len(values) != len(r.opt) or not all(
                    isinstance(d, int) and not isinstance(d, bool) and lo <= d <= hi
                    for d, lo, hi in zip(values, r.min, r.max)):
                raise self.fail(f"{path}.shapes[{j}]", f"{values!r} is not a shape of "
                                f"{r.name!r} in [{list(r.min)}, {list(r.max)}]")
            out.append(tuple(values))
        return tuple(out)

    def same_io(self, main: ProgramBody, body: ProgramBody,
                shapes: tuple[tuple[int, ...], ...], path: str) -> None:
        """A plan takes the top level's inputs at its shapes, and gives its outputs."""
        for kind, ours, theirs in (("inputs", body.inputs, main.inputs),
                                   ("outputs", body.outputs, main.outputs)):
            if len(ours) != len(theirs):
                raise self.fail(f"{path}.{kind}", f"{len(ours)} {kind}, the top level has "
                                f"{len(theirs)}")
            for j, (a, b) in enumerate(zip(ours, theirs)):
                ta, tb = body.tensors[a.tensor], main.tensors[b.tensor]
                if (ta.name, ta.dtype, a.dtype, a.format, len(ta.shape)) != (
                        tb.name, tb.dtype, b.dtype, b.format, len(tb.shape)):
                    raise self.fail(f"{path}.{kind}[{j}]", f"{ta.name!r} ({a.format}, "
                                    f"{a.dtype.name.lower()}) is not the top level's {tb.name!r} "
                                    f"({b.format}, {b.dtype.name.lower()})")
                if kind == "inputs" and ta.shape != shapes[j]:
                    raise self.fail(f"{path}.{kind}[{j}]", f"{ta.name!r} has shape "
                                    f"{list(ta.shape)}, the profile says {list(shapes[j])}")

    def batch_padding(self, ranges: tuple[InputRange, ...], profiles: list[Profile],
                      main: ProgramBody) -> None:
        """Padding runs a batch in a larger plan and slices its outputs: only axis 0 may
        vary, over one range shared by the inputs, and every output's axis 0 is the batch."""
        varying = [r for r in ranges if r.min != r.max]
        bounds = {(r.min[0], r.max[0]) for r in varying}
        if any(r.min[1:] != r.max[1:] for r in varying) or len(bounds) > 1:
            raise self.fail("shape_range.pad_batch", "padding needs the inputs' axis 0 alone "
                            "to vary, over one range")
        if not varying:
            return
        largest = bounds.pop()[1]
        batches = []
        for k, prof in enumerate(profiles):
            sizes = {shape[0] for shape, r in zip(prof.shapes, ranges) if r.min != r.max}
            body = main if prof.body is None else prof.body
            outs = {body.tensors[io.tensor].shape[:1] for io in body.outputs}
            if len(sizes) != 1 or outs != {(min(sizes),)}:
                raise self.fail(f"profiles[{k}].shapes", "padding needs one batch for every "
                                "varying input and every output")
            batches.append(sizes.pop())
        if largest not in batches:
            raise self.fail("profiles", f"no profile runs the largest batch {largest}")

    def tensor(self, i: int, t: Any, arena: int, prefix: str) -> TensorInfo:
        path = f"{prefix}tensors[{i}]"
        name = self.get(t, "name", str, path)
        shape_list = self.get(t, "shape", list, path)
        if len(shape_list) > MAX_RANK:
            raise self.fail(f"{path}.shape", f"rank {len(shape_list)} exceeds {MAX_RANK}")
        for d in shape_list:
            if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= MAX_DIM:
                raise self.fail(f"{path}.shape", f"bad dimension {d!r}")
        shape = tuple(shape_list)
        try:
            dtype = DType.from_name(self.get(t, "dtype", str, path))
        except ValueError as e:
            raise self.fail(f"{path}.dtype", str(e)) from None
        kind = self.get(t, "kind", str, path)
        if kind not in TENSOR_KINDS:
            raise self.fail(f"{path}.kind", f"unknown kind {kind!r}")
        nbytes = self.get(t, "nbytes", int, path)
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if nbytes != expected:
            raise self.fail(f"{path}.nbytes", f"{nbytes} does not match shape {shape} "
                            f"of {dtype.name.lower()} ({expected})")
        offset = self.get(t, "offset", int, path)
        alias = None
        if "alias" in t:
            a = self.get(t, "alias", dict, path)
            kind_a = self.get(a, "kind", str, f"{path}.alias")
            if kind_a not in ALIAS_KINDS or kind not in ("activation",):
                raise self.fail(f"{path}.alias", f"bad alias kind {kind_a!r} on a {kind}")
            alias = (self.get(a, "tensor", int, f"{path}.alias"),
                     self.get(a, "offset", int, f"{path}.alias"), kind_a)
        align_to = dtype.itemsize if alias else ALIGNMENT
        if offset < 0 or offset % align_to:
            raise self.fail(f"{path}.offset", f"{offset} is negative or not {align_to}-aligned")
        if kind == "weight":
            if offset + nbytes > len(self.weights):
                raise self.fail(path, f"weight bytes [{offset}, {offset + nbytes}) lie outside "
                                f"the {len(self.weights)}-byte weights section",
                                self.weights_offset + min(offset, len(self.weights)))
        elif offset + nbytes > arena:
            raise self.fail(path, f"arena bytes [{offset}, {offset + nbytes}) exceed "
                            f"arena_bytes {arena}")
        return TensorInfo(i, name, shape, dtype, kind, offset, nbytes, alias)

    def attr_value(self, v: Any, path: str, depth: int = 0) -> Any:
        if isinstance(v, (bool, int, float, str)) or v is None:
            return v
        if depth < _MAX_ATTR_DEPTH:
            if isinstance(v, list):
                return [self.attr_value(x, path, depth + 1) for x in v]
            if isinstance(v, dict):
                return {str(k): self.attr_value(x, f"{path}.{k}", depth + 1)
                        for k, x in v.items()}
        raise self.fail(path, f"attribute value nests deeper than {_MAX_ATTR_DEPTH} levels")

    def ref(self, v: Any, n: int, path: str, optional: bool) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or not (-1 if optional else 0) <= v < n:
            raise self.fail(path, f"tensor reference {v!r} is out of range [0, {n})")
        return v

    def layer(self, i: int, lay: Any, tensors: tuple[TensorInfo, ...], prefix: str) -> LayerInfo:
        path = f"{prefix}layers[{i}]"
        name = self.get(lay, "name", str, path)
        op = self.get(lay, "op", str, path)
        if self.known_ops is not None and op not in self.known_ops:
            raise self.fail(f"{path}.op", f"unknown op {op!r} in layer {name!r}")
        n = len(tensors)
        ins = tuple(self.ref(v, n, f"{path}.inputs[{k}]", True)
                    for k, v in enumerate(self.count(lay, "inputs", path, 4096)))
        outs = tuple(self.ref(v, n, f"{path}.outputs[{k}]", False)
                     for k, v in enumerate(self.count(lay, "outputs", path, 4096)))
        if not outs or (ins and ins[0] < 0):
            raise self.fail(path, f"layer {name!r} has no outputs or no first input")
        attrs_raw = self.get(lay, "attrs", dict, path)
        attrs = {str(k): self.attr_value(v, f"{path}.attrs.{k}") for k, v in attrs_raw.items()}
        fused = self.get(lay, "fused_from", list, path)
        if not all(isinstance(s, str) for s in fused):
            raise self.fail(f"{path}.fused_from", "expected a list of strings")
        precision = self.get(lay, "precision", str, path)
        tactic = self.get(lay, "tactic", str, path)
        return LayerInfo(i, name, op, ins, outs, attrs, tuple(fused), precision, tactic)

    def io(self, i: int, e: Any, tensors: tuple[TensorInfo, ...], kind: str,
           prefix: str) -> IOTensor:
        path = f"{prefix}{kind}s[{i}]"
        index = self.ref(self.get(e, "tensor", int, path), len(tensors), f"{path}.tensor", False)
        t = tensors[index]
        if t.kind != kind:
            raise self.fail(f"{path}.tensor", f"tensor {t.name!r} is a {t.kind}, not an {kind}")
        fmt = self.get(e, "format", str, path)
        try:
            dtype = DType.from_name(self.get(e, "dtype", str, path))
            formats.check_format(fmt, t.shape, dtype)
            expected = formats.describe(t.name, fmt, t.shape, dtype)
        except ValueError as err:
            raise self.fail(path, str(err)) from None
        desc = self.get(e, "descriptor", dict, path)
        stored = {k: (tuple(v) if isinstance(v, list) else v) for k, v in desc.items()}
        if stored.get("data_type") == 0 and expected.data_type >= formats.EXTENSION_TYPE_BASE:
            # written before pydla's extension codes (UNKNOWN for every type cuDLA lacks)
            stored["data_type"] = expected.data_type
        if stored != expected.__dict__:
            raise self.fail(f"{path}.descriptor", f"does not match tensor {t.name!r} "
                            f"{t.shape} in format {fmt}")
        return IOTensor(index, fmt, dtype, expected)

    def dataflow(self, tensors: tuple[TensorInfo, ...], layers: tuple[LayerInfo, ...],
                 inputs: tuple[IOTensor, ...], outputs: tuple[IOTensor, ...],
                 prefix: str) -> None:
        defined = {t.index for t in tensors if t.kind in ("weight", "input")}
        declared_in = [io.tensor for io in inputs]
        if sorted(declared_in) != sorted(t.index for t in tensors if t.kind == "input"):
            raise self.fail(f"{prefix}inputs", "input list does not match the input tensors")
        if len(set(declared_in)) != len(declared_in):
            raise self.fail(f"{prefix}inputs", "an input is listed twice")
        declared_out = [io.tensor for io in outputs]
        if sorted(declared_out) != sorted(t.index for t in tensors if t.kind == "output"):
            raise self.fail(f"{prefix}outputs", "output list does not match the output tensors")
        if len(set(declared_out)) != len(declared_out):
            raise self.fail(f"{prefix}outputs", "an output is listed twice")
        for lay in layers:
            for k, ref in enumerate(lay.inputs):
                if ref >= 0 and ref not in defined:
                    raise self.fail(f"{prefix}layers[{lay.index}].inputs[{k}]",
                                    f"layer {lay.name!r} reads {tensors[ref].name!r} before "
                                    "it is written")
            for k, ref in enumerate(lay.outputs):
                if ref in defined:
                    raise self.fail(f"{prefix}layers[{lay.index}].outputs[{k}]",
                                    f"layer {lay.name!r} writes {tensors[ref].name!r}, which is "
                                    "an input, a weight or already written")
                defined.add(ref)
        for t in tensors:
            if t.index not in defined:
                raise self.fail(f"{prefix}tensors[{t.index}]",
                                f"{t.kind} {t.name!r} is never written")

    def aliases(self, tensors: tuple[TensorInfo, ...], layers: tuple[LayerInfo, ...],
                prefix: str) -> None:
        """A tensor may share bytes with a parent only as a Concat view or an in-place reuse."""
        writer = {ref: lay for lay in layers for ref in lay.outputs}
        last_reader: dict[int, int] = {}
        for lay in layers:
            for ref in lay.inputs:
                last_reader[ref] = lay.index
        children: dict[int, list[TensorInfo]] = {}
        for t in tensors:
            if t.alias is None:
                continue
            path = f"{prefix}tensors[{t.index}].alias"
            p, rel, kind = t.alias
            if not 0 <= p < len(tensors) or p == t.index or tensors[p].kind == "weight":
                raise self.fail(path, f"bad parent tensor {p}")
            parent = tensors[p]
            if rel < 0 or rel + t.nbytes > parent.nbytes or t.offset != parent.offset + rel:
                raise self.fail(path, f"{t.name!r} does not lie inside {parent.name!r}")
            w = writer.get(p) if kind == "view" else writer.get(t.index)
            if kind == "view":
                ok = (w is not None and w.op == "Concat" and w.attrs.get("in_place") is True
                      and t.index in w.inputs)
            elif kind == "reshape":  # all of the parent's bytes, which nothing rewrites
                ok = (w is not None and w.op in RESHAPES and w.attrs.get("in_place") is True
                      and w.inputs[:1] == (p,) and rel == 0 and t.nbytes == parent.nbytes
                      and parent.kind == "activation")
            else:
                ok = (w is not None and w.attrs.get("in_place") is True and w.inputs[:1] == (p,)
                      and rel == 0 and parent.alias is None and last_reader.get(p) == w.index)
            if not ok:
                raise self.fail(path, f"{t.name!r} may not share the bytes of {parent.name!r}")
            children.setdefault(p, []).append(t)
        for p, kids in children.items():
            if any(k.alias[2] == "reuse" for k in kids) and len(kids) > 1:  # type: ignore[index]
                raise self.fail(f"{prefix}tensors[{p}]", "a reused tensor has more than one child")
            # Concat's parts tile their parent; reshapes span all of it and are read-only.
            kids = sorted((k for k in kids if k.alias[2] == "view"),  # type: ignore[index]
                          key=lambda k: k.alias[1])  # type: ignore[index]
            for a, b in zip(kids, kids[1:]):
                if a.alias[1] + a.nbytes > b.alias[1]:  # type: ignore[index]
                    raise self.fail(f"{prefix}tensors[{b.index}]",
                                    f"views {a.name!r} and {b.name!r} overlap")
        for t in tensors:  # alias chains end (no cycles)
            seen, i = 0, t.index
            while tensors[i].alias is not None:
                i = tensors[i].alias[0]  # type: ignore[index]
                seen += 1
                if seen > len(tensors):
                    raise self.fail(f"{prefix}tensors[{t.index}].alias", "alias chain has a cycle")

    def arena_overlaps(self, tensors: tuple[TensorInfo, ...], layers: tuple[LayerInfo, ...],
                       prefix: str) -> None:
        """Two buffers (alias groups) alive at once must not share bytes."""
        end = len(layers)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for t in tensors:
            if t.kind in ("input", "output"):
                first[t.index], last[t.index] = -1, end
        for lay in layers:
            for ref in lay.outputs:
                first.setdefault(ref, lay.index)
                last[ref] = max(last.get(ref, lay.index), lay.index)
            for ref in lay.inputs:
                if ref >= 0:
                    last[ref] = max(last.get(ref, lay.index), lay.index)

        def root(i: int) -> int:
            while tensors[i].alias is not None:
                i = tensors[i].alias[0]  # type: ignore[index]
            return i

        span: dict[int, list[int]] = {}
        for t in tensors:
            if t.kind == "weight" or t.index not in first:
                continue
            r = root(t.index)
            s = span.setdefault(r, [first[t.index], last[t.index]])
            s[0] = min(s[0], first[t.index])
            s[1] = max(s[1], last[t.index])
        live = sorted(((s[0], s[1], tensors[r]) for r, s in span.items()
                       if tensors[r].nbytes > 0), key=lambda x: (x[0], x[1], x[2].index))
        for a in range(len(live)):
            fa, la, ta = live[a]
            for b in range(a + 1, len(live)):
                fb, lb, tb = live[b]
                if fb > la:
                    break
                if ta.offset < tb.offset + tb.nbytes and tb.offset < ta.offset + ta.nbytes:
                    raise self.fail(f"{prefix}tensors[{tb.index}]",
                                    f"{tb.name!r} shares arena bytes with {ta.name!r} while both "
                                    "are alive")
