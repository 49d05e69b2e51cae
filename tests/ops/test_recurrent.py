import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.oracle import assert_close, check_against_ort, make_model, run_ort, run_pydla

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SEQ, BATCH, SIZE, HIDDEN = 4, 3, 5, 6


def _rand(shape, seed, scale=0.5):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _recurrent_model(op, dirs=1, layout=0, bias=True, lens=None, initial=False, peephole=False,
                     outputs=("Y", "Y_h", "Y_c"), const_x=False, opset=14, **attrs):
    """A model of one recurrent node with every optional input as an initializer."""
    g = GATES[op]
    inits = {"W": _rand((dirs, g * HIDDEN, SIZE), 1), "R": _rand((dirs, g * HIDDEN, HIDDEN), 2)}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"] = _rand((dirs, 2 * g * HIDDEN), 3)
        names[3] = "B"
    if lens is not None:
        inits["L"] = np.array(lens, np.int32)
        names[4] = "L"
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    if initial:
        inits["H0"] = _rand(state, 4)
        names[5] = "H0"
        if op == "LSTM":
            inits["C0"] = _rand(state, 5)
            names[6] = "C0"
    if peephole:
        inits["P"] = _rand((dirs, 3 * HIDDEN), 6)
        names[7] = "P"
    while names and not names[-1]:
        names.pop()
    x_shape = [BATCH, SEQ, SIZE] if layout else [SEQ, BATCH, SIZE]
    outs = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    direction = {1: attrs.pop("direction", "forward"), 2: "bidirectional"}[dirs]
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, names, outs, hidden_size=HIDDEN,
                            direction=direction, **attrs)
    inputs = {} if const_x else {"X": (np.float32, x_shape)}
    if const_x:
        inits["X"] = _rand(x_shape, 7)
    model = make_model([node], inputs, [o for o in outs if o], inits, opset=opset)
    return model, {"X": _rand(x_shape, 0, 1.0)}


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_recurrent_directions(op, direction):
    model, feeds = _recurrent_model(op, direction=direction)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_bidirectional_lens_initial(op):
    model, feeds = _recurrent_model(op, dirs=2, lens=[4, 2, 3], initial=True,
                                    peephole=op == "LSTM")
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_batchwise_layout(op):
    # onnxruntime has no layout=1: its layout-0 results, transposed, are the oracle.
    kw = {"dirs": 2, "lens": [4, 2, 3], "initial": True, "peephole": op == "LSTM"}
    model0, feeds0 = _recurrent_model(op, **kw)
    model1, _ = _recurrent_model(op, layout=1, **kw)
    states0 = {t.name: numpy_helper.to_array(t) for t in model0.graph.initializer}
    for t in model1.graph.initializer:
        if t.name in ("H0", "C0"):
            swapped = np.ascontiguousarray(states0[t.name].transpose(1, 0, 2))
            t.CopyFrom(numpy_helper.from_array(swapped, t.name))
    want = run_ort(model0, feeds0)
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    got = run_pydla(model1, {"X": feeds0["X"].transpose(1, 0, 2).copy()})
    assert_close(got, want)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_empty_sequence(op):
    model, feeds = _recurrent_model(op, dirs=2, lens=[0, 4, 2], initial=True)
    check_against_ort(model, feeds)


def test_lstm_bidirectional_seq_lens_initial_states_opset7():
    model, feeds = _recurrent_model("LSTM", dirs=2, lens=[1, 4, 3], initial=True, opset=7)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_defaults_no_bias(op):
    model, feeds = _recurrent_model(op, bias=False, outputs=("", "Y_h"))
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_clip(op):
    model, feeds = _recurrent_model(op, dirs=2, clip=0.3)
    check_against_ort(model, feeds)


def test_lstm_input_forget_peepholes():
    model, feeds = _recurrent_model("LSTM", initial=True, peephole=True, input_forget=1)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("dirs", [1, 2])
def test_gru_linear_before_reset(lbr, dirs):
    model, feeds = _recurrent_model("GRU", dirs=dirs, initial=True, lens=[3, 4, 1],
                                    linear_before_reset=lbr)
    check_against_ort(model, feeds)


@pytest.mark.parametrize("op,activations,alpha,beta", [
    ("LSTM", ["HardSigmoid", "LeakyRelu", "Tanh"], [0.3, 0.05], [0.4]),
    ("LSTM", ["Sigmoid", "Elu", "Softsign"], [0.7], []),
    ("LSTM", ["Sigmoid", "ScaledTanh", "Affine"], [0.9, 0.8], [0.5, 0.1]),
    ("GRU", ["HardSigmoid", "Softplus"], [], []),
    ("GRU", ["Sigmoid", "ThresholdedRelu"], [0.1], []),
    ("RNN", ["Relu"], [], []),
    ("RNN", ["LeakyRelu"], [0.2], []),
])
def test_recurrent_activations(op, activations, alpha, beta):
    attrs = {"activations": activations}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    model, feeds = _recurrent_model(op, initial=True, **attrs)
    check_against_ort(model, feeds)


def test_rnn_bidirectional_activations_per_direction():
    model, feeds = _recurrent_model("RNN", dirs=2, activations=["Tanh", "Relu"])
    check_against_ort(model, feeds)


@pytest.mark.parametrize("outputs", [("Y",), ("", "Y_h"), ("", "", "Y_c"), ("Y", "", "Y_c")])
def test_lstm_output_subsets(outputs):
    model, feeds = _recurrent_model("LSTM", outputs=outputs)
    check_against_ort(model, feeds)


def test_lstm_constant_folded():
    # Every input is constant: the layer is evaluated at build time.
    node = helper.make_node("LSTM", ["C", "W", "R"], ["Y"], hidden_size=HIDDEN)
    add = helper.make_node("Add", ["Y", "Z"], ["S"])
    inits = {"C": _rand((SEQ, BATCH, SIZE), 7), "W": _rand((1, 4 * HIDDEN, SIZE), 1),
             "R": _rand((1, 4 * HIDDEN, HIDDEN), 2)}
    model = make_model([node, add], {"Z": (np.float32, [SEQ, 1, BATCH, HIDDEN])}, ["S"], inits)
    check_against_ort(model, {"Z": _rand((SEQ, 1, BATCH, HIDDEN), 8)})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_float64(op):
    # onnxruntime runs these in float32 only: compare the float64 model with its results.
    model, feeds = _recurrent_model(op, dirs=2, initial=True, lens=[2, 4, 3])
    want = run_ort(model, feeds)
    for t in model.graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.dtype == np.float32:
            t.CopyFrom(numpy_helper.from_array(arr.astype(np.float64), t.name))
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    got = run_pydla(model, {"X": feeds["X"].astype(np.float64)})
    assert_close(got, [w.astype(np.float64) for w in want], rtol=1e-4, atol=1e-5)
