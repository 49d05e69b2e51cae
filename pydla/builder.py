"""The builder: ONNX model → IR → passes → plan → loadable bytes (needs onnx)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from pydla.backends.cpu.registry import REFERENCE
from pydla.dla import build as dla_build
from pydla.dla.adjust import adjust_for_dla
from pydla.dtypes import DType
from pydla.engine.memory import MEMORY_SHARE, default_memory_limit
from pydla.errors import BuildError, ModelImportError, PydlaError
from pydla.frontend.onnx import import_model
from pydla.frontend.onnx.ops.ml import zipmap_outputs
from pydla.ir import Graph
from pydla.loadable import Program, read_loadable, write_loadable
from pydla.passes import PassContext, PassManager, default_passes
from pydla.plan import profiles
from pydla.plan.calibrate import tensor_ranges
from pydla.plan.layouts import assign_layouts
from pydla.plan.lower import IOFormat, lower
from pydla.plan.memory import check_build_memory
from pydla.plan.precision import autocast, feed_io_types
from pydla.plan.tactics import TimingCache, choose_tactics, timer_for
from pydla.plan.weak_typing import WeakTyping
from pydla.quantization import Int8Options
from pydla.quantization.build import quantize_for_build
from pydla.tools.layerinfo import layer_info


@dataclass
class BuildOptions:
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    # Values fixed at build time for parameter-like inputs (shape tensors).
    input_values: Mapping[str, np.ndarray] = field(default_factory=dict)
    input_formats: Sequence[IOFormat] | None = None
    output_formats: Sequence[IOFormat] | None = None
    dla_core: int | None = None
    # --buildDLAStandalone / --allowGPUFallback with --useDLACore (pydla.dla.build).
    dla_standalone: bool = False
    gpu_fallback: bool = False
    # --adjustForDLA: rewrite layers the DLA refuses into equivalent ones (pydla.dla.adjust)
    adjust_for_dla: bool = False
    mem_pools: Mapping[str, int] = field(default_factory=dict)
    opt_level: int = 3
    disabled_passes: Sequence[str] = ()
    verbose: bool = False
    # Receives every build decision (pass log) when verbose is set.
    log: Callable[[str], None] | None = None
    # Run the IR verifier after every pass (tests switch it on).
    verify_passes: bool = False
    # --autocast: convert the float32 network to this type where the policy calls it safe
    # (pydla.plan.precision); the converted types are then kept, as a strongly typed build.
    autocast: DType | None = None
    # --fp16/--bf16: TensorRT's weak typing: layers may run in these types where the policy
    # allows and, timed on the CPU, they are faster than float32 (pydla.plan.weak_typing).
    allow: Sequence[DType] = ()
    # --stronglyTyped: every layer runs in the network's own types; refuses the above.
    strongly_typed: bool = False
    layer_precisions: Mapping[str, str] = field(default_factory=dict)
    calibration: Sequence[Mapping[str, np.ndarray]] = ()
    # --int8: calibrate (or read --calib's cache) and quantize (pydla.quantization).
    int8: Int8Options | None = None
    # Time every candidate kernel per layer (else pick by priority); --timingCacheFile.
    autotune: bool = True
    timing_cache: str | None = None
    # Keep the activations of regions with blocked kernels (depthwise layers, chains of 1×1
    # layers that gain more than their reorders cost) in blocks of 16 channels
    # (pydla.plan.layouts); off: every tensor planar (for comparisons).
    blocked_layouts: bool = True
    # progress(done, total[, phase]): the phases are "Compiling kernels" (parallel numba
    # compiles, pydla.plan.precompile) and "Autotuning"; the CUDA tuner reports no phase.
    progress: Callable[..., Any] | None = None
    # --target: the backend the loadable is tuned for, "cpu" or "cuda"; a cuda loadable
    # records the GPU architecture (cuda_arch, e.g. "sm_90"; default: the visible GPU's)
    # and is refused by another (docs/cuda.md).
    target: str = "cpu"
    cuda_arch: str | None = None
    # --noTF32: float32 layers compute in strict FP32 on a GPU (no TF32 tensor-core engines
    # in cuDNN); TF32 is allowed by default, as in TensorRT. Nothing changes on the CPU.
    no_tf32: bool = False
    # The most memory the build may use (bytes; --buildMemoryLimit). None: the larger of
    # MEMORY_SHARE of this machine's memory and --memPoolSize=workspace (docs/builder.md).
    memory_limit: int | None = None
    # --minShapes/--optShapes/--maxShapes: an optimization profile, built as one loadable
    # holding a plan per shape set, weights shared (pydla.plan.profiles; docs/builder.md).
    min_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    opt_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    max_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    # The most plans a profile whose batch rows are not proven independent may take (one
    # per shape in range); more is refused before anything is built.
    max_profile_plans: int = 64


def load_model(model: onnx.ModelProto | str | os.PathLike[str] | bytes) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        return onnx.load(os.fspath(model))
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001  (protobuf raises several types)
        raise ModelImportError(f"cannot parse ONNX model: {type(e).__name__}: {e}") from e


def build_graph(model: onnx.ModelProto, options: BuildOptions,
                ctx: PassContext | None = None) -> Graph:
    """Import and optimize; the pass log lands in ``ctx``."""
    limit, how = build_memory_limit(options)
    graph = import_model(model, options.shapes, options.input_values, memory_limit=limit)
    graph.remove_dead()
    if graph.bodies and (options.int8 is not None or options.calibration):
        # calibration runs the graph's layers one by one in float32 (pydla.quantization.
        # runner, pydla.plan.calibrate); a Loop's body is a sub-program they cannot run
        raise BuildError("calibration (--int8, --calibrationInputs) runs the network layer by "
                         "layer and does not run a Loop layer's body: build this model "
                         "without them")
    ctx = ctx or PassContext(verbose=options.verbose, echo=options.log)
    ctx.target = options.target
    autotune = options.autotune and options.opt_level >= 3 and options.target == "cpu"
    check_build_memory(graph, limit, how, autotune=autotune,
                       calibration=bool(options.calibration), fold_limit=ctx.fold_limit_bytes)
    if options.int8 is not None:
        if options.autocast is not None or options.allow:
            raise BuildError("--int8 with --autocast/--fp16/--bf16 is not supported: the "
                             "layers int8 does not take stay float32")
        quantize_for_build(graph, options.int8, ctx, opt_level=options.opt_level,
                           disabled=options.disabled_passes,
                           overrides=options.layer_precisions,
                           verify_each=options.verify_passes)
    manager = PassManager(default_passes(), opt_level=options.opt_level,
                          disabled=options.disabled_passes, verify_each=options.verify_passes)
    if options.opt_level > 0:
        manager.run(graph, ctx)
    cache = TimingCache.load(options.timing_cache) if autotune else None
    _assign_precisions(graph, options, ctx, autotune, cache)
    for body in graph.bodies:
        _build_body(body, options, ctx, autotune, cache)
    if options.opt_level == 0:  # reference kernels only, for bisecting
        for node in graph.nodes:
            node.tactic = REFERENCE
        return graph
    if options.target == "cpu" and options.opt_level >= 2 and options.blocked_layouts:
        assign_layouts(graph, ctx)
    # CPU kernels are timed only for the CPU; a cuda target is tuned on the GPU after
    # lowering (build → _tune_on_gpu). Passes add constants and layers: check again before
    # the samples are drawn.
    check_build_memory(graph, limit, how, autotune=autotune, calibration=False,
                       fold_limit=0)
    choose_tactics(graph, ctx, autotune=autotune, cache=cache, progress=options.progress)
    if cache is not None:
        cache.save()
    return graph


def _build_body(body: Graph, options: BuildOptions, ctx: PassContext, autotune: bool,
                cache: TimingCache | None) -> None:
    """A Loop body (pydla.frontend.onnx.ops.loop_layer) takes the main graph's passes,
    layouts and tactic choice; it keeps the network's types (--fp16/--autocast convert the
    main graph only: the body's carried state must keep the type it was imported with)."""
    body.remove_dead()
    if options.opt_level == 0:
        for node in body.nodes:
            node.tactic = REFERENCE
        return
    PassManager(default_passes(), opt_level=options.opt_level, disabled=options.disabled_passes,
                verify_each=options.verify_passes).run(body, ctx)
    if options.target == "cpu" and options.opt_level >= 2 and options.blocked_layouts:
        assign_layouts(body, ctx)
    choose_tactics(body, ctx, autotune=autotune, cache=cache)


def _assign_precisions(graph: Graph, options: BuildOptions, ctx: PassContext, autotune: bool,
                       cache: TimingCache | None) -> None:
    """--autocast converts, --fp16/--bf16 allow (weak typing: timed per region on the CPU),
    --stronglyTyped and no flag keep the network's types. Records each converted layer's
    type and why for the layer info (build["precision"])."""
    allow = tuple(dict.fromkeys(options.allow))
    if any(t not in (DType.FLOAT16, DType.BFLOAT16) for t in allow):
        raise BuildError(f"--fp16/--bf16 allow fp16 or bf16, not "
                         f"{[t.short for t in allow]}")
    if options.strongly_typed and (options.autocast is not None or allow):
        raise BuildError("--stronglyTyped runs the network's own types: it excludes "
                         "--fp16, --bf16 and --autocast")
    if options.autocast is not None and allow:
        raise BuildError("--autocast converts the network, --fp16/--bf16 let the builder "
                         "choose per layer: give one of them")
    target = options.autocast or (allow[0] if allow else None)
    if target is None:
        if options.layer_precisions and options.int8 is None:
            raise BuildError("--layerPrecisions adjusts --autocast, --fp16 or --bf16; without "
                             "them the model's own types decide every layer's precision")
        return
    ranges = tensor_ranges(graph, list(options.calibration)) if options.calibration else None
    chooser = None
    if allow and autotune:
        io_types = {id(v): f.dtype for vs, fs in ((graph.inputs, options.input_formats),
                                                 (graph.outputs, options.output_formats))
                    for v, f in zip(vs, fs or ()) if f.dtype is not None}
        chooser = WeakTyping(timer_for(graph, cache), allow, io_types)
    chosen = autocast(graph, target, ctx, options.layer_precisions, ranges, choose=chooser)
    if allow and chooser is None:
        untimed = ("the target is cuda (tuned on the GPU)" if options.target != "cpu"
                   else "autotuning is off")
        default = f"allowed; not timed: {untimed}"
    else:
        default = "allowed" if allow else "--autocast"
    layers = {}
    for name, (short, why) in chosen.items():
        why = (chooser.reasons.get(name) if chooser is not None else None) or (
            f"{short}: {why}" if why else f"{short}: {default}")
        layers[name] = [short, why.split(": ", 1)[1]]
        if chooser is not None and name in chooser.reasons:
            ctx.note(f"precision: {name!r} {why}")
    removed = feed_io_types(graph, [f.dtype for f in options.input_formats or ()],
                            [f.dtype for f in options.output_formats or ()])
    for name in removed:
        ctx.note(f"precision: {name!r} removed: the I/O format carries that type")
    ctx.records["precision"] = {
        "mode": "weak" if allow else "autocast", "allowed": [t.short for t in allow],
        "layers": layers}
    if cache is not None:
        cache.save()


def build(model: onnx.ModelProto | str | os.PathLike[str] | bytes,
          options: BuildOptions | None = None) -> bytes:
    """Compile ``model`` into loadable bytes."""
    options = options or BuildOptions()
    proto = load_model(model)
    zipmaps = zipmap_outputs(proto.graph)  # refuses a ZipMap that is not a last step
    if options.adjust_for_dla:
        proto, rewrites = adjust_for_dla(proto)
        if options.verbose and options.log is not None:
            for line in rewrites:
                options.log(f"adjust_for_dla: {line}")
    if options.min_shapes or options.opt_shapes or options.max_shapes:
        return _build_profile(proto, options, zipmaps)
    dla = dla_build.plan(proto, options)
    meta, weights = _lower_model(proto, options, zipmaps, dla)
    data = write_loadable(meta, weights)
    if options.target == "cuda" and autotune_on_gpu(options, meta["target"].get("cuda_arch")):
        tuned = _tune_on_gpu(data, options)
        meta["target"]["cuda_tactics"] = tuned["tactics"]
        meta["build"]["cuda_autotune"] = {k: tuned[k] for k in ("seconds", "timed_layers", "ms",
                                                                 "env")}
        data = write_loadable(meta, weights)
    limit = options.mem_pools.get("workspace")
    if limit is not None:
        needed = workspace_bytes(read_loadable(data), options.target)
        if needed > limit:
            raise BuildError(f"the engine needs {needed} bytes of workspace; "
                             f"--memPoolSize=workspace:{limit}B is too small (use at least "
                             f"workspace:{needed}B)")
    return data


def _lower_model(proto: onnx.ModelProto, options: BuildOptions, zipmaps: Any,
                 dla: Any = None) -> tuple[dict[str, Any], dict[int, np.ndarray]]:
    """The model at ``options.shapes``, optimized, tuned and lowered: (meta, weights)."""
    ctx = PassContext(verbose=options.verbose, echo=options.log)
    graph = build_graph(proto, options, ctx)
    target: dict[str, Any] = {"backend": options.target, "dla_core": options.dla_core,
                              "mem_pools": dict(options.mem_pools)}
    if options.target == "cuda":
        target["cuda_arch"] = options.cuda_arch or _visible_cuda_arch()
    elif options.target != "cpu":
        raise BuildError(f"unknown target {options.target!r}; pydla builds for 'cpu' or 'cuda'")
    build_info = {"opset": graph.opset, "opt_level": options.opt_level,
                  "shapes": {k: list(v) for k, v in options.shapes.items()}, **ctx.records}
    if zipmaps:  # outputs whose maps the session makes (docs/builder.md, "ZipMap")
        build_info["zipmap"] = zipmaps
    if options.no_tf32:  # read by the CUDA backend when it builds cuDNN plans
        build_info["no_tf32"] = True
    if dla is not None:
        build_info["dla"] = dla_build.record(dla, graph, options.dla_core,
                                             options.dla_standalone, options.gpu_fallback)
    meta, weights = lower(graph, input_formats=options.input_formats,
                          output_formats=options.output_formats, target=target, build=build_info)
    return meta, weights


def _build_profile(proto: onnx.ModelProto, options: BuildOptions, zipmaps: Any) -> bytes:
    """An optimization profile: a plan per shape set of pydla.plan.profiles.plan_shapes,
    each built as a fixed-shape loadable would be, merged into one loadable."""
    refused = [flag for flag, on in (("--target=cuda", options.target != "cpu"),
                                     ("--useDLACore (the DLA has no dynamic shapes)",
                                      options.dla_core is not None),
                                     ("--int8", options.int8 is not None),
                                     ("--calibrationInputs", bool(options.calibration)))
               if on]
    if refused:
        raise BuildError(f"an optimization profile (--minShapes/--optShapes/--maxShapes) is "
                         f"built for the CPU, without {', '.join(refused)}: give fixed --shapes")
    ranges = profiles.parse_profile(options.min_shapes, options.opt_shapes, options.max_shapes,
                                    options.shapes)
    inits = {t.name for t in proto.graph.initializer}
    model_inputs = {v.name: v for v in proto.graph.input if v.name not in inits}
    unknown = [p.name for p in ranges if p.name not in model_inputs]
    if unknown:
        raise BuildError(f"the optimization profile names {unknown}, which are not inputs of "
                         f"the model ({list(model_inputs)})")
    symbols = {(name, axis): d.dim_param for name, v in model_inputs.items()
               for axis, d in enumerate(v.type.tensor_type.shape.dim) if d.dim_param}
    limit, _ = build_memory_limit(options)
    batched = {p.name for p in ranges if p.varying()}

    def prove(b1: int, b2: int) -> str | None:
        graphs = []
        for b in (b1, b2):
            shapes = {**options.shapes, **{p.name: (b, *p.opt[1:]) if p.name in batched
                                           else p.opt for p in ranges}}
            try:
                graphs.append((import_model(proto, shapes, options.input_values,
                                            memory_limit=limit), b))
            except ModelImportError as e:  # the profile promises every shape in range
                raise BuildError(f"the optimization profile's shapes {dict(shapes)} (inside "
                                 f"its range) do not import: {e}") from e
        return profiles.batch_rows_independent(graphs, batched)

    plan_set = profiles.plan_shapes(ranges, symbols, prove, options.max_profile_plans)
    say = options.log if options.verbose and options.log is not None else None
    if say is not None:
        how = ("batch padding (rows proven independent)" if plan_set.pad_batch
               else f"exact plans ({plan_set.why_exact})" if plan_set.why_exact else "fixed")
        say(f"profile: {len(plan_set.shapes)} plans, {how}")
    with tempfile.TemporaryDirectory(prefix="pydla-profile-") as tmp:
        # plans share their layers' kernel timings through one timing cache
        cache = options.timing_cache or os.path.join(tmp, "timing.json")
        plans = []
        for shapes in plan_set.shapes:
            if say is not None:
                say(f"profile: building the plan for {shapes}")
            plans.append(_lower_model(proto, replace(
                options, shapes={**options.shapes, **shapes}, min_shapes={}, opt_shapes={},
                max_shapes={}, timing_cache=cache), zipmaps))
    meta, weights, extra = profiles.merge_plans(plans, ranges, plan_set.pad_batch)
    meta["build"]["profile"] = {"plans": len(plans), "pad_batch": plan_set.pad_batch,
                                "why_exact": plan_set.why_exact}
    data = write_loadable(meta, weights, extra)
    limit_ws = options.mem_pools.get("workspace")
    if limit_ws is not None:
        program = read_loadable(data)
        for k in range(len(plans)):
            needed = workspace_bytes(program.profile_program(k), options.target)
            if needed > limit_ws:
                raise BuildError(f"profile {k} needs {needed} bytes of workspace; "
                                 f"--memPoolSize=workspace:{limit_ws}B is too small")
    return data


def build_memory_limit(options: BuildOptions) -> tuple[int, str]:
    """The build's memory limit in bytes, and how to raise it (for the refusal)."""
    if options.memory_limit is not None:
        if options.memory_limit <= 0:
            raise BuildError(f"the build memory limit must be positive, not "
                             f"{options.memory_limit}")
        return options.memory_limit, "--buildMemoryLimit (BuildOptions.memory_limit) sets it"
    default = default_memory_limit()
    workspace = options.mem_pools.get("workspace", 0)
    how = (f"by default {MEMORY_SHARE:.0%} of this machine's memory; --buildMemoryLimit=SIZE "
           "or --memPoolSize=workspace:SIZE raises it")
    return max(default, workspace), how


def workspace_bytes(program: Program, target: str) -> int:
    """The scratch memory the engine needs: on the CPU, what its bound program's shared
    workspace holds (every layer's kernel and fused scratch, the largest layer's); for
    other targets, the layer info's estimate of the fused layers' scratch."""
    if target == "cpu":
        from pydla.backends.cpu.backend import CpuProgram

        return CpuProgram(program).workspace.nbytes
    return int(layer_info(program)["memory"]["workspace_bytes"])


def autotune_on_gpu(options: BuildOptions, arch: str | None) -> bool:
    """Whether a cuda build times its kernels here: autotuning is on and the GPU the
    loadable is built for is the visible one (building for another architecture, or on a
    machine without a GPU, records no tactics: the backend then times them at load)."""
    if not (options.autotune and options.opt_level >= 3 and arch):
        return False
    return _visible_cuda_arch() == arch


def _tune_on_gpu(data: bytes, options: BuildOptions) -> dict[str, Any]:
    from pydla.backends.cuda.tuning import tune

    try:
        return tune(data, log=options.log, progress=options.progress)
    except PydlaError as e:
        raise BuildError(f"autotuning on the GPU failed: {e}") from e


def _visible_cuda_arch() -> str | None:
    """The architecture of GPU 0 (e.g. "sm_90"), or None where CUDA is not available."""
    try:
        from pydla.backends.cuda.driver import arch_name, device_count

        return arch_name(0) if device_count() else None
    except Exception:  # noqa: BLE001  (no cuda-bindings, no driver: a portable loadable)
        return None
