"""Train the sample digit classifier shipped in pydla/samples (run once; needs scikit-learn).

A small MLP is trained on scikit-learn's bundled 8×8 digits and written as an ONNX model
(Flatten → Gemm → Relu → Gemm → Softmax, input ``image`` [N, 1, 8, 8] scaled to [0, 1]);
the held-out digits are saved beside it for ``pydla demo``.

    python scripts/train_digits.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

OUT = Path(__file__).resolve().parents[1] / "pydla" / "samples"


def main() -> None:
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=0, stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=600, random_state=0)
    clf.fit(x_train, y_train)
    print(f"scikit-learn accuracy on held-out digits: {clf.score(x_test, y_test):.4f}")

    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
        helper.make_node("Gemm", ["h_relu", "w2", "b2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(a, n) for n, a in
         (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="pydla/scripts/train_digits.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    OUT.mkdir(exist_ok=True)
    onnx.save(model, OUT / "digits_mlp.onnx")
    np.savez_compressed(OUT / "digits_test.npz", images=(x_test * 16).astype(np.uint8)
                        .reshape(-1, 1, 8, 8), labels=y_test.astype(np.uint8))
    print(f"wrote {OUT / 'digits_mlp.onnx'} and {OUT / 'digits_test.npz'} "
          f"({len(y_test)} held-out digits)")


if __name__ == "__main__":
    main()
