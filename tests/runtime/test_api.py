"""The Pythonic API: lifetimes, numpy and DLPack, layout conversion, async, streams."""

import numpy as np
import pytest

from pydla import api, cudla
from pydla.engine.device import DEVICES, MODULES
from pydla.engine.faults import ClosedError, InvalidDeviceError, InvalidParamError
from pydla.engine.memory import DEVICE, MEMORY
from pydla.engine.stream import STREAMS
from tests.runtime.conftest import expected, inputs


class Tensor:
    """A DLPack producer that is not a numpy array."""

    def __init__(self, array: np.ndarray) -> None:
        self._a = array

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_run_with_numpy_names_and_dlpack(add_mul):
    a, b = inputs(0)
    with api.Device() as dev:
        m = dev.load(add_mul)
        assert m.input_names == ["a", "b"] and m.output_names == ["s", "p"]
        by_list = m.run([a, b])
        by_name = m.run({"b": b, "a": a})
        by_dlpack = m.run([Tensor(a), Tensor(b)])
        for outs in (by_list, by_name, by_dlpack):
            for got, want in zip(outs, expected(a, b)):
                assert got.dtype == np.float32 and got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.from_dlpack(by_list[0]).shape == (1, 4, 2, 3)  # outputs are DLPack producers
        with pytest.raises(InvalidParamError, match="shape"):
            m.run([a[0], b])
        with pytest.raises(InvalidParamError, match="module takes"):
            m.run({"a": a})


def test_layout_conversion_from_descriptors(add_mul_chw16):
    a, b = inputs(1)
    with api.Device() as dev:
        m = dev.load(add_mul_chw16)
        assert [api.tensor_format(d) for d in m.input_descriptors] == ["chw16", "chw16"]
        s, p = m.run([a, b])  # float32 in: cast to fp16 and packed to chw16 for the device
        assert s.dtype == np.float32  # the model's output type, read from chw16 fp16
        want = expected(a.astype(np.float16).astype(np.float32),
                        b.astype(np.float16).astype(np.float32))
        np.testing.assert_allclose(s, want[0], rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(p, want[1], rtol=2e-3, atol=2e-3)


def test_async_submission_on_several_streams(add_mul):
    with api.Device() as dev:
        m = dev.load(add_mul)
        streams = [dev.stream() for _ in range(3)]
        jobs = [(inputs(i), m.submit(inputs(i), stream=streams[i % 3])) for i in range(30)]
        for (a, b), future in jobs:
            for got, want in zip(future.result(timeout=30), expected(a, b)):
                np.testing.assert_allclose(got, want, rtol=1e-6)
        event = streams[0].record()
        streams[1].wait(event)
        streams[1].synchronize()
        assert event.query()
        end = streams[0].record()
        end.synchronize()
        assert event.elapsed_ms(end) >= 0


def test_profile_gives_per_layer_times(add_mul):
    with api.Device() as dev:
        m = dev.load(add_mul)
        outs, stats = m.profile(inputs(2))
        assert [t.name for t in stats.layers] == m.layer_names
        assert stats.status == cudla.Status.Success and stats.duration_ns > 0
        np.testing.assert_allclose(outs[1], expected(*inputs(2))[1], rtol=1e-6)


def _live_counts() -> tuple[int, ...]:
    device_memory = sum(r.kind == DEVICE for r in list(MEMORY._regions.values()))
    return len(DEVICES.values()), len(MODULES.values()), len(STREAMS.values()), device_memory


def test_close_releases_everything_in_order(add_mul, tmp_path):
    path = tmp_path / "m.loadable"
    path.write_bytes(add_mul)
    before = _live_counts()
    dev = api.Device()
    m = dev.load(path)
    s = dev.stream()
    futures = [m.submit(inputs(i), stream=s) for i in range(20)]
    dev.close()  # waits for the queued work first
    assert all(f.done() and f.exception() is None for f in futures)
    assert _live_counts() == before
    with pytest.raises(ClosedError):
        m.run(inputs(0))
    with pytest.raises(ClosedError):
        s.synchronize()
    with pytest.raises(ClosedError):
        dev.load(add_mul)
    dev.close()  # twice is fine
    with pytest.raises(InvalidDeviceError):
        api.Device(3)


def test_module_close_alone(add_mul):
    with api.Device() as dev:
        m1, m2 = dev.load(add_mul), dev.load(add_mul)  # one cuDLA handle each
        m1.close()
        np.testing.assert_allclose(m2.run(inputs(0))[1], expected(*inputs(0))[1], rtol=1e-6)


def test_module_tensor_descriptor_repr(add_mul):
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    try:
        mod = cudla.module_load_from_memory(dev, add_mul, len(add_mul), 0)
        descs = cudla.module_get_attributes(
            mod, cudla.ModuleAttributeType.INPUT_TENSOR_DESCRIPTORS)
        text = repr(descs[0])
        cudla.module_unload(mod, 0)
    finally:
        cudla.destroy_device(dev)
    assert text.startswith("<pydla.cudla.ModuleTensorDescriptor 'a' fp32:")
    assert "n,c,h,w=(1, 4, 2, 3)" in text and "size=" in text and "stride=(" in text
    blank = repr(cudla.ModuleTensorDescriptor())
    assert "data_type=0 data_format=0" in blank  # a zero-filled record still prints
