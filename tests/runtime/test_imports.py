"""The runtime modules import only numpy, numba and the standard library — never onnx."""

import subprocess
import sys
import textwrap
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_runtime_modules_do_not_import_the_builder(add_mul, tmp_path):
    path = tmp_path / "m.loadable"
    path.write_bytes(add_mul)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        import numpy as np
        from pydla import api, cudla, driver, runtime
        from nine_steps import run_nine_steps  # the nine steps import no builder code
        data = open({str(path)!r}, "rb").read()
        a = np.ones((1, 4, 2, 3), np.float32)
        outs = run_nine_steps(data, [a.view(np.uint8).reshape(-1)] * 2)
        assert (outs[0].view(np.float32) == 2).all()
        with api.Device() as dev:
            assert (dev.load(data).run([a, a])[1] == 1).all()
        top = {{name.split(".")[0] for name in sys.modules}}
        bad = top & {{"onnx", "onnxruntime", "google", "torch", "sklearn", "ml_dtypes"}}
        assert not bad, bad
        assert not any(m.startswith(("pydla.builder", "pydla.frontend", "pydla.passes"))
                       for m in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
