"""The nine steps with a float16 model whose I/O is fp16:chw16 (DLA's native layout).

The loadable is built as trtexec would with ``--inputIOFormats=fp16:chw16
--outputIOFormats=fp16:chw16``. Its descriptors then say HALF / NCxHWx, and ``size_`` is
the padded byte size (channels rounded up to 16). The program packs its input into that
layout before step 6 and unpacks the outputs after step 8 with pydla's layout helpers,
which read everything they need from the descriptors (and work on upstream's descriptors
too). ``python examples/nine_steps_fp16_chw16.py``
"""

from __future__ import annotations

import numpy as np
from nine_steps import conv_net, run_nine_steps

from pydla import cudla
from pydla.api import pack_tensor, unpack_tensor


def build_chw16(model) -> bytes:  # an onnx.ModelProto
    from pydla.builder import BuildOptions, build
    from pydla.dtypes import DType
    from pydla.plan.lower import IOFormat

    fmt = IOFormat(DType.FLOAT16, "chw16")
    return build(model, BuildOptions(input_formats=[fmt], output_formats=[fmt, fmt]))


def describe(loadable: bytes) -> tuple[list, list]:
    """The module's descriptors (a short-lived device handle, as a real program might)."""
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    kinds = cudla.ModuleAttributeType
    ins = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    outs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    cudla.module_unload(module, 0)
    cudla.destroy_device(dev)
    return ins, outs


def main() -> None:
    loadable = build_chw16(conv_net(np.float16))
    in_descs, out_descs = describe(loadable)
    for d in in_descs + out_descs:
        print(f"{d.name}: {cudla.DataType(d.data_type).name} "
              f"{cudla.DataFormat(d.data_format).name} n{d.n} c{d.c} h{d.h} w{d.w}, "
              f"size_ {d.size_} bytes")
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float16)
    outputs = run_nine_steps(loadable, [pack_tensor(x, in_descs[0])])
    for buf, d in zip(outputs, out_descs):
        y = unpack_tensor(buf, d)
        print(f"{d.name}: shape {y.shape} {y.dtype}, mean {y.mean():+.4f}")


if __name__ == "__main__":
    main()
