"""The runtime path imports only numpy (and numba), never the builder's dependencies."""

import subprocess
import sys
import textwrap

import numpy as np
from onnx import helper

from pydla.builder import build
from tests.oracle import make_model

BUILDER_ONLY = ("onnx", "onnxruntime", "google.protobuf", "ml_dtypes", "sklearn", "torch")


def test_loading_and_running_imports_no_builder_dependency(tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (np.float32, [2, 3])},
                       ["y"])
    path = tmp_path / "m.bin"
    path.write_bytes(build(model))
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import pydla.engine
        modules = ["pydla.engine", "pydla.loadable", "pydla.backends.cpu"]
        try:
            import pydla.cudla, pydla.runtime, pydla.driver
            modules += ["pydla.cudla"]
        except ImportError:
            pass
        m = pydla.engine.load(open({str(path)!r}, "rb").read())
        y = m.run([np.array([[-1, 2, -3], [4, -5, 6]], np.float32)])[0]
        assert y.tolist() == [[0, 2, 0], [4, 0, 6]], y
        bad = sorted(k for k in sys.modules if k.split(".")[0] in {BUILDER_ONLY!r}
                     or k.startswith("google.protobuf"))
        print("BAD", bad)
        assert not bad, bad
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout
