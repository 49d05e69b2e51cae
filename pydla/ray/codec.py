"""The JSON schema of pydla's HTTP serving endpoint (docs/ray.md, "Serving").

Request::

    {"inputs": {"x": [[...], ...]},              # nested lists, cast to the input's dtype
     "encoding": "list" | "base64"}              # of the outputs; optional, default "list"
    {"inputs": {"x": {"base64": "...", "dtype": "float32", "shape": [1, 3, 224, 224]}}}

An input is either nested lists or raw little-endian C-order bytes with their dtype and
shape. Its shape is ``(n, *row)`` for ``n`` rows, or the row shape alone for one sample
(then the outputs have no row dimension either).

Response (200)::

    {"outputs": {"probs": {"dtype": "float32", "shape": [1, 4], "data": [[...]]}}}
    {"outputs": {"probs": {"dtype": "float32", "shape": [1, 4], "base64": "..."}}}

Error (400 for a request that does not fit the module, 500 if the engine failed)::

    {"error": "input 'x' has shape (3, 224); the module takes (n, 3, 224, 224) ..."}
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

from pydla.errors import RequestError

ENCODINGS = ("list", "base64")
# Numeric types only: a dtype string from the network never makes numpy build objects.
_DTYPES = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
           "float16", "float32", "float64"}


def decode_request(body: Any) -> tuple[dict[str, np.ndarray], str]:
    """The request's input arrays and the encoding asked for the outputs."""
    if not isinstance(body, Mapping) or not isinstance(body.get("inputs"), Mapping):
        raise RequestError('the request must be a JSON object with an "inputs" object')
    unknown = sorted(set(body) - {"inputs", "encoding"})
    if unknown:
        raise RequestError(f"unknown request fields {unknown} (known: inputs, encoding)")
    encoding = body.get("encoding", "list")
    if encoding not in ENCODINGS:
        raise RequestError(f'"encoding" must be one of {list(ENCODINGS)}, not {encoding!r}')
    return {str(k): decode_array(str(k), v) for k, v in body["inputs"].items()}, encoding


def decode_array(name: str, value: Any) -> np.ndarray:
    if not isinstance(value, Mapping):
        try:
            arr = np.asarray(value)
        except ValueError as e:  # ragged nesting
            raise RequestError(f"input {name!r}: nested lists are not rectangular ({e})"
                               ) from None
        if arr.dtype.kind not in "biuf":
            raise RequestError(f"input {name!r}: nested lists must hold numbers, not "
                               f"{arr.dtype}")
        return arr
    keys = set(value)
    if keys != {"base64", "dtype", "shape"}:
        raise RequestError(f'input {name!r}: a raw input has exactly "base64", "dtype" and '
                           f'"shape", not {sorted(keys)}')
    dtype_name, shape = value["dtype"], value["shape"]
    if dtype_name not in _DTYPES:
        raise RequestError(f"input {name!r}: dtype {dtype_name!r} is not one of "
                           f"{sorted(_DTYPES)}")
    if (not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                       for d in shape)):
        raise RequestError(f"input {name!r}: shape must be a list of non-negative integers, "
                           f"not {shape!r}")
    try:
        raw = base64.b64decode(value["base64"], validate=True)
    except (binascii.Error, TypeError, ValueError) as e:
        raise RequestError(f"input {name!r}: invalid base64 ({e})") from None
    dtype = np.dtype(dtype_name).newbyteorder("<")
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise RequestError(f"input {name!r}: {len(raw)} bytes given, shape {shape} of "
                           f"{dtype_name} is {expected} bytes")
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=False).reshape(shape)


def encode_array(arr: np.ndarray, encoding: str) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": arr.dtype.name, "shape": list(arr.shape)}
    if encoding == "base64":
        little = np.ascontiguousarray(arr, arr.dtype.newbyteorder("<"))
        out["base64"] = base64.b64encode(little.tobytes()).decode("ascii")
    else:
        out["data"] = arr.tolist()
    return out


def encode_response(outputs: Mapping[str, np.ndarray], encoding: str) -> dict[str, Any]:
    return {"outputs": {k: encode_array(v, encoding) for k, v in outputs.items()}}


def decode_response(body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The client's side: output arrays from a 200 response's JSON."""
    out = {}
    for name, v in body["outputs"].items():
        if "base64" in v:
            out[name] = decode_array(name, v)
        else:
            out[name] = np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"])
    return out


def encode_request(inputs: Mapping[str, np.ndarray], encoding: str = "base64"
                   ) -> dict[str, Any]:
    """The client's side: a request body with every input raw (``base64``) or as lists."""
    if encoding == "base64":
        return {"inputs": {k: encode_array(np.asarray(v), "base64") for k, v in inputs.items()},
                "encoding": "base64"}
    return {"inputs": {k: np.asarray(v).tolist() for k, v in inputs.items()}}
