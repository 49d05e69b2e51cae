"""The new CUDA kernels (GRU steps, TopK, QGemm, DynamicQuantizeLinear, the LSTM's
quantize_hidden range, 3-D convolution, TreeEnsemble) run on the host through
``scripts/cuda_emulate.py`` against the CPU backend, without a GPU: a regression in their
generated CUDA C fails here. A subprocess, because the emulator stands a mock in for CuPy.
About 40 s of CPU (g++)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = ("gru_reverse_after_lens_input", "gru_bidir_before_lens_const_layout1", "topk_int64",
         "ms_qgemm", "dq_lstm_reverse_states", "dynamic_quantize", "conv3d", "trees")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator compiles with g++")
def test_new_kernels_match_the_cpu_backend_in_the_emulator() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cuda_emulate.py"), *CASES],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "0 case(s) with mismatches" in out, out
    for case in CASES:
        lines = [line for line in out.splitlines() if line.startswith(f"{case} (")]
        assert lines and all("outputs match" in line and "mismatched" not in line
                             for line in lines), (case, out)
