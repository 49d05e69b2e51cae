"""The CUDA int8 convolution (``kernels/qconv.py``: its dp4a and scalar loops, uint8/int8
activations, residuals, float and int32 outputs, 1-D) runs on the host through
``scripts/cuda_emulate.py`` against the CPU backend's int8 layers, bit for bit, without a
GPU: ``tests/gpu/int8_cases.py``'s networks. (The tensor-core candidate's threads
cooperate: the emulator runs the dp4a kernel of those layers; the GPU test runs it.)
A subprocess, because the emulator stands a mock in for CuPy. About 25 s of CPU (g++,
onnxruntime's quantizer)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.int8_cases import CASES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator compiles with g++")
def test_int8_convolutions_match_the_cpu_backend_in_the_emulator() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cuda_emulate.py"), *CASES],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "0 case(s) with mismatches" in out, out
    for case in CASES:
        lines = [line for line in out.splitlines() if line.startswith(f"{case} (")]
        assert len(lines) == 1 and "outputs match" in lines[0] and "mismatched" not in \
            lines[0], (case, out)
