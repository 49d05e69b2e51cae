"""The scratch the layers of a bound program share (pydla.backends.cpu.workspace)."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.cpu import workspace
from pydla.backends.cpu.workspace import Workspace, scratch, sharing
from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from tests.oracle import model_tolerance_ok, run_ort
from tests.unit.test_layouts import bottleneck_model, mobile_block_model


def _span(a: np.ndarray) -> tuple[int, int]:
    return a.ctypes.data, a.ctypes.data + a.nbytes


def test_layers_share_bytes_their_own_buffers_do_not() -> None:
    ws = Workspace()
    with sharing(ws):
        ws.next_layer()
        a, b = scratch((10,)), scratch((3, 5), np.int64)
        ws.next_layer()
        c = scratch(200)
    assert scratch(4).array.tolist() == [0, 0, 0, 0]  # outside a program: its own zeros
    assert ws.nbytes == max(64 + 128, 832)  # each request rounded up to whole lines
    (a0, a1), (b0, _), (c0, c1) = _span(a.array), _span(b.array), _span(c.array)
    assert a1 <= b0 and b.array.dtype == np.int64 and b.array.shape == (3, 5)
    assert c0 == a0 and c1 > b0  # the next layer reuses the same bytes
    assert all(p % workspace.ALIGN == 0 for p in (a0, b0, c0))
    with sharing(ws), pytest.raises(RuntimeError, match="allocated"):
        scratch(1)


@pytest.mark.parametrize("make", [mobile_block_model, bottleneck_model])
def test_programs_share_one_buffer_and_read_only_what_they_wrote(
        make: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer's kernel scratch is in the program's one buffer, poisoned with NaN
    before the first run: outputs still match onnxruntime, run after run."""
    monkeypatch.setattr(workspace, "FILL", float("nan"))
    model, feeds = make()  # type: ignore[operator]
    module = LoadedModule(build(model, BuildOptions(autotune=False)))
    assert module.bound.workspace.nbytes > 0
    want = run_ort(model, feeds)
    for _ in range(2):
        model_tolerance_ok(module.run(feeds), want)
