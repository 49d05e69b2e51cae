"""pydla's Pythonic runtime API: devices, modules, streams and events as objects.

Builds the conv net of ``nine_steps.py`` with fp16:chw16 I/O, then runs it without
handling a single descriptor: inputs are cast and packed, outputs unpacked, from the
module's descriptors. Shows synchronous runs, asynchronous submissions on two streams,
events, per-layer timing, and release in order on leaving ``with``.
``python examples/pythonic.py``
"""

from __future__ import annotations

import time

import numpy as np
from nine_steps import conv_net
from nine_steps_fp16_chw16 import build_chw16

from pydla import api


def main() -> None:
    loadable = build_chw16(conv_net(np.float16))
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(32)]

    with api.Device(0) as dev:
        module = dev.load(loadable)
        formats = [api.tensor_format(d) for d in module.input_descriptors]
        print("inputs", module.input_names, formats)
        print("outputs", module.output_names)

        features, logits = module.run({"x": batch[0]})  # float32 in: cast + packed to chw16
        print("run:", features.shape, features.dtype, f"logits mean {logits.mean():+.4f}")

        with dev.stream() as s1, dev.stream() as s2:
            start = s1.record()
            t0 = time.perf_counter()
            futures = [module.submit([x], stream=(s1, s2)[i % 2]) for i, x in enumerate(batch)]
            queued = time.perf_counter() - t0
            s2.wait(s1.record())  # s2's later work waits for everything queued on s1
            end = s2.record()
            results = [f.result() for f in futures]
            end.synchronize()
            print(f"{len(results)} submissions queued in {queued * 1e3:.1f} ms, ran in "
                  f"{start.elapsed_ms(end):.1f} ms on two streams")

        same = np.array_equal(results[0][1], logits)
        print("async result equals the synchronous one:", same)
        # Outputs are numpy arrays, so any DLPack consumer takes them without a copy.
        print("DLPack:", np.from_dlpack(results[0][0]).shape)

        _, stats = module.profile([batch[0]])
        for layer in stats.layers:
            print(f"  {layer.name:>12}: {layer.duration_ns / 1e3:8.1f} us")
    print("device closed: buffers, module handles and streams released")


if __name__ == "__main__":
    main()
