"""Soak test of pydla.cudla: many tasks over many threads and streams on small models.

Every thread drives its own streams on a shared device handle (one per model, as
cuDLA allows one module per handle); each stream has its own registered buffers and
repeats copy-in, ``submit_task``, copy-out. Every task's output bytes are compared with
the same task run serially (one thread, the legacy stream), and the process's resident
memory is measured after a warm-up and at the end: a leak of one small object per task
shows as megabytes over 100,000 tasks.

    python scripts/soak.py                       # 100,000 tasks, 8 threads x 8 streams
    python scripts/soak.py --tasks 2000 --json soak.json

Exit status 1 if any output differs, any call failed, or resident memory grew by more than
--max-rss-growth after the warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pydla import cudla, runtime
from pydla.builder import BuildOptions, build

POOL = 32  # distinct input sets per model; task i uses set i % POOL
SLOTS = 4  # tasks queued per stream between two synchronizations
H2D = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
D2H = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost


def _model(nodes: list, inputs: dict[str, list[int]], outputs: list[str],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "soak", [helper.make_tensor_value_info(n, f32, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, f32, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    return onnx.shape_inference.infer_shapes(model)


def small_models() -> list[onnx.ModelProto]:
    """Two inputs and outputs of elementwise layers; and a 3x3 convolution with ReLU."""
    rng = np.random.default_rng(7)
    add_mul = _model([helper.make_node("Add", ["a", "b"], ["t"]),
                      helper.make_node("Relu", ["t"], ["s"]),
                      helper.make_node("Mul", ["a", "b"], ["p"])],
                     {"a": [1, 4, 2, 3], "b": [1, 4, 2, 3]}, ["s", "p"], {})
    conv = _model([helper.make_node("Conv", ["x", "w", "c"], ["h"], pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["h"], ["y"])],
                  {"x": [1, 3, 8, 8]}, ["y"],
                  {"w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
                   "c": rng.standard_normal(8).astype(np.float32)})
    return [add_mul, conv]


def _check(result: tuple) -> object:
    err, *values = result
    if err != 0:
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else None


@dataclass
class Target:
    """One device handle with one module, its descriptors and the serial reference."""

    dev: int
    module: int
    in_sizes: list[int]
    out_sizes: list[int]
    inputs: list[list[np.ndarray]]  # POOL sets of uint8 input buffers
    expected: list[list[bytes]] = field(default_factory=list)  # per set, per output


def open_target(loadable: bytes, seed: int) -> Target:
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    kinds = cudla.ModuleAttributeType
    ins = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    outs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    rng = np.random.default_rng(seed)
    pool = [[rng.standard_normal(d.size_ // 4).astype(np.float32).view(np.uint8) for d in ins]
            for _ in range(POOL)]
    return Target(dev, module, [d.size_ for d in ins], [d.size_ for d in outs], pool)


class Lane:
    """One stream with its own registered device buffers, Task record and host slots."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.stream = _check(runtime.cudaStreamCreate())
        sizes = target.in_sizes + target.out_sizes
        self.ptrs = [_check(runtime.cudaMalloc(n)) for n in sizes]
        self.regs = [cudla.mem_register(target.dev, p, n, 0) for p, n in zip(self.ptrs, sizes)]
        n_in = len(target.in_sizes)
        self.task = cudla.Task()
        self.task.module_handle = target.module
        self.task.input_tensor, self.task.output_tensor = self.regs[:n_in], self.regs[n_in:]
        self.slots = [[np.zeros(n, np.uint8) for n in target.out_sizes] for _ in range(SLOTS)]

    def run(self, index: int) -> None:
        """Queue task ``index`` (input set index % POOL) and its copy-out into a slot."""
        n_in = len(self.target.in_sizes)
        for ptr, x in zip(self.ptrs[:n_in], self.target.inputs[index % POOL]):
            _check(runtime.cudaMemcpyAsync(ptr, x, x.nbytes, H2D, self.stream))
        cudla.submit_task(self.target.dev, int(self.task), 1, int(self.stream), 0)
        for host, ptr in zip(self.slots[index % SLOTS], self.ptrs[n_in:]):
            _check(runtime.cudaMemcpyAsync(host, ptr, host.nbytes, D2H, self.stream))

    def mismatches(self, indices: list[int]) -> int:
        """Wait for the stream; count the queued tasks whose outputs differ from serial."""
        _check(runtime.cudaStreamSynchronize(self.stream))
        want = self.target.expected
        return sum(any(host.tobytes() != ref for host, ref in
                       zip(self.slots[i % SLOTS], want[i % POOL])) for i in indices)

    def close(self) -> None:
        for r in self.regs:
            cudla.mem_unregister(self.target.dev, r)
        for p in self.ptrs:
            _check(runtime.cudaFree(p))
        _check(runtime.cudaStreamDestroy(self.stream))


def serial_reference(target: Target) -> None:
    lane = Lane(target)
    n_in = len(target.in_sizes)
    for inputs in target.inputs:
        for ptr, x in zip(lane.ptrs[:n_in], inputs):
            _check(runtime.cudaMemcpy(ptr, x, x.nbytes, H2D))
        cudla.submit_task(target.dev, int(lane.task), 1, 0, 0)  # legacy stream: runs now
        outs = []
        for ptr, n in zip(lane.ptrs[n_in:], target.out_sizes):
            host = np.zeros(n, np.uint8)
            _check(runtime.cudaMemcpy(host, ptr, n, D2H))
            outs.append(host.tobytes())
        target.expected.append(outs)
    lane.close()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class SoakResult:
    tasks: int
    threads: int
    streams_per_thread: int
    seconds: float
    tasks_per_second: float
    mismatches: int
    errors: list[str]
    rss_start: int
    rss_after_warmup: int
    rss_end: int

    @property
    def rss_growth(self) -> int:
        return self.rss_end - self.rss_after_warmup


def _phase(lanes_per_thread: list[list[Lane]], counts: list[int], offset: int,
           mismatches: list[int], errors: list[str]) -> None:
    """Each thread runs ``counts[t]`` tasks round-robin over its lanes, SLOTS at a time."""

    def worker(t: int) -> None:
        lanes, done = lanes_per_thread[t], 0
        try:
            while done < counts[t]:
                queued: list[list[int]] = [[] for _ in lanes]
                for k, lane in enumerate(lanes):
                    for _ in range(SLOTS):
                        if done == counts[t]:
                            break
                        index = offset + t * 1_000_003 + done
                        lane.run(index)
                        queued[k].append(index)
                        done += 1
                for lane, indices in zip(lanes, queued):
                    if indices:
                        mismatches[t] += lane.mismatches(indices)
        except Exception as e:  # noqa: BLE001  (reported, and the soak fails)
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(lanes_per_thread))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def soak(tasks: int = 100_000, threads: int = 8, streams: int = 8,
         warmup: float = 0.05) -> SoakResult:
    rss_start = rss_bytes()
    targets = [open_target(build(m, BuildOptions(autotune=False)), seed)
               for seed, m in enumerate(small_models())]
    for target in targets:
        serial_reference(target)
    lanes = [[Lane(targets[t % len(targets)]) for _ in range(streams)] for t in range(threads)]
    mismatches = [0] * threads
    errors: list[str] = []
    warm = max(threads * streams * SLOTS, int(tasks * warmup))
    start = time.perf_counter()
    _phase(lanes, _split(min(warm, tasks), threads), 0, mismatches, errors)
    gc.collect()
    rss_warm = rss_bytes()
    _phase(lanes, _split(tasks - min(warm, tasks), threads), 500_000, mismatches, errors)
    seconds = time.perf_counter() - start
    gc.collect()
    rss_end = rss_bytes()
    for lane in (lane for per in lanes for lane in per):
        lane.close()
    for target in targets:
        cudla.module_unload(target.module, 0)
        cudla.destroy_device(target.dev)
    return SoakResult(tasks, threads, streams, round(seconds, 2), round(tasks / seconds, 1),
                      sum(mismatches), errors, rss_start, rss_warm, rss_end)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--streams", type=int, default=8, help="streams per thread")
    p.add_argument("--max-rss-growth", type=int, default=1 << 20,
                   help="bytes of resident memory growth allowed after the warm-up")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    result = soak(args.tasks, args.threads, args.streams)
    figures = {**asdict(result), "rss_growth": result.rss_growth}
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    ok = not result.mismatches and not result.errors
    return 0 if ok and result.rss_growth <= args.max_rss_growth else 1


if __name__ == "__main__":
    sys.exit(main())
