"""TREx's reading of an engine graph and a profile, ported for the tests.

NVIDIA's trt-engine-explorer (TREx) is not published as a wheel (it installs from a TensorRT
checkout), so this ports the parts that read the files, key for key, from
github.com/NVIDIA/TensorRT tools/experimental/trt-engine-explorer/trex at 8c6d69dd
(TensorRT 10.9; parser.py read_graph_file/import_graph_file/read_profiling_file, layer.py
Layer/_parse_constant, activations.py Activation, engine_plan.py merge_profiling_data).
The two tables are TREx's own (Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES).
"""

from __future__ import annotations

import json
import re
from typing import Any

# activations.py: _regionFormatDict
REGION_FORMATS = {
    "Four wide channel vectorized row major Int8 format" : "Int8 NC/4HW4",
    "Four wide channel vectorized row major FP32 format" : "FP32 NC/4HW4",
    "Thirty-two wide channel vectorized row major Int8 format": "Int8 NC/32HW32",
    "Thirty-two wide channel vectorized row major FP32 format": "FP32 NC/32HW32",
    "Thirty-two wide channel vectorized row major FP16 format": "FP16 NC/32HW32",
    "Thirty-two wide channel vectorized row major Int8 format with 3 spatial dimensions": "Int8 NC32DHW",  # noqa: E501
    "Thirty-two wide channel vectorized row major FP16 format with 3 spatial dimensions": "FP16 NC32DHW",  # noqa: E501
    "Sixteen wide channel vectorized row major FP16 format": "FP16 NC16HW",
    "Channel major FP16 format where channel % 4 == 0": "FP16 NHWC4",
    "Channel major FP32 format where channel % 4 == 0": "FP32 NHWC4",
    "Channel major Int8 format where channel % 4 == 0": "Int8 NHWC4",
    "Channel major FP16 format where channel % 8 == 0": "FP16 NHWC8",
    "Channel major FP16 format where channel % 16 == 0": "FP16 NHWC16",
    "Channel major FP16 format where channel == 4 and column stride % 32 == 0": "FP16 NHWC4",
    "Channel major INT8 format where channel == 4 and column stride % 32 == 0": "Int8 NHWC4",
    "Channel major FP16 format where channel % 2 == 0": "FP16 NHWC2",
    "Channel major INT8 format where column stride % 32 == 0": "Int8 NHWC1",
    "Channel major INT8 format where channel % 16 == 0": "Int8 NHWC16",
    "Row major INT8 format where column stride % 64 == 0": "Int8 NCHW",
    "Channel major FP16 format where channel % 8 == 0 with 3 spatial dimensions": "FP16 NDHWC8",
    "Channel major FP16 format where channel == 1 and column stride % 32 == 0": "FP16 NHWC1",
    "Row major FP16 format where column stride % 64 == 0": "FP16",
    "Two wide channel vectorized row major FP16 format": "FP16 NC/2HW2",
    "Row major linear FP32": "FP32 NCHW",
    "Row major linear Int32": "INT32 NCHW",
    "Row major linear FP16 format": "FP16 NCHW",
    "Row major Int8 format": "Int8 NCHW",
    "Channel major FP32 format":"FP32 NHWC",
    "Channel major FP16 format": "FP16 NHWC",
    "Channel major Int8 format": "Int8 NHWC",
    "Row major linear BOOL": "Bool",
    "Channel major FP32 format with 3 spatial dimensions": "FP32 NDHWC",
    "Channel major FP32 format with 3 spatial dimensions where channel % 4 == 0": "FP32 NDHWC4",
    "Channel major FP32 format where channel % 4 == 0 with 3 spatial dimensions": "FP32 NDHWC4",
    "Row major linear UInt8 format" : "UInt8 NCHW",
    "Channel major UInt8 format": "UInt8 NHWC",
    "Row major linear Int64 format": "Int64 NCHW",
    "Row major linear BFloat16 format": "BF16 NCHW",
    "Channel major BFloat16 format where channel % 8 == 0": "BF16 NHWC8",
    "Channel major BFloat16 format where channel % 4 == 0": "BF16 NHWC4",
    "Channel major BFloat16 format where channel % 8 == 0 with 3 spatial dimensions": "BF16 NDHWC8",
    "Channel major BFloat16 format where channel % 2 == 0": "BF16 NHWC2",
    "Two wide channel vectorized row major BFloat16 format": "BF16 NC2HW",
    "Row major linear FP4 format (kLINEAR)" : "FP4",
    "Row major linear FP4 format" : "FP4",
    "Row major linear FP8 format": "FP8 NCHW",
    "Unknown format": "Unknown format",
    "BFloat16": "BFloat16",
    "Bool": "Bool",
    "Double": "Double",
    "DoubleComplex": "DoubleComplex",
    "Float": "Float",
    "FloatComplex": "FloatComplex",
    "FP8": "FP8",
    "Half": "Half",
    "Int16": "Int16",
    "Int32": "Int32",
    "Int64": "Int64",
    "Int8": "Int8",
    "None": "None",
    "UInt16": "UInt16",
    "UInt32": "UInt32",
    "UInt64": "UInt64",
    "UInt8": "UInt8",
    "Int4": "Int4",
    "FP4": "FP4",
    "FP4E2M1": "FP4",
}

# activations.py: parse_tensor_info's table (precision, bytes per element)
PRECISIONS = {
    'FP8':            ('FP8',    1),
    'FP16':           ('FP16',   2),
    'Half':           ('FP16',   2),
    'FP32':           ('FP32',   4),
    'Float':          ('FP32',   4),
    'Double':         ('FP64',   8),
    'BFloat16':       ('FP32',   2),
    'Int8':           ('INT8',   1),
    'Int16':          ('INT16',  2),
    'INT32':          ('INT32',  4),
    'Int32':          ('INT32',  4),
    'Int64':          ('INT64',  8),
    'UInt8':          ('UINT8',  1),
    'UInt16':         ('UINT16', 2),
    'UInt32':         ('UINT32', 4),
    'UInt64':         ('UINT64', 8),
    'Int4':           ('INT4',   0.5),
    'FP4':            ('FP4',    0.5),
}


def activation(raw: dict[str, Any]) -> dict[str, Any]:
    """activations.Activation: name, shape, short format, precision, size in bytes."""
    fmt = REGION_FORMATS.get(raw["Format/Datatype"].replace(".", ""), "Unknown format")
    parts = fmt.split(" ")
    data_type = parts[0] if len(parts) == 2 else fmt  # TREx: desc.split(' ') into 2 or whole
    precision, size = PRECISIONS.get(data_type, (data_type, 0))
    n = 1
    for d in raw["Dimensions"]:
        n *= d
    return {"name": raw["Name"], "shape": raw["Dimensions"], "format": fmt,
            "precision": precision, "size_bytes": n * size}


def _constant(raw: dict[str, Any]) -> int:
    """layer.Layer._parse_constant's byte count; KeyError (TREx: no weights) for other types."""
    sizes = {"Int8": 1, "Half": 2, "Float": 4, "Int32": 4}
    return raw["Count"] * sizes[raw["Type"]]


def layer(raw: dict[str, Any]) -> dict[str, Any]:
    """layer.Layer: the keys it reads, and what it derives from them."""
    out = {"name": raw["Name"], "type": raw.get("ParameterType", raw["LayerType"]),
           "subtype": raw["LayerType"], "metadata": raw.get("Metadata"),
           "inputs": [activation(t) for t in raw["Inputs"]],
           "outputs": [activation(t) for t in raw["Outputs"]]}
    out["precision"] = out["inputs"][0]["precision"] if out["inputs"] else None
    for key in ("Weights", "Bias"):
        try:
            out[key.lower() + "_size"] = _constant(raw[key])
        except KeyError:
            out[key.lower() + "_size"] = 0
    return out


def read_graph_file(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """parser.read_graph_file + import_graph_file (first shape profile, names made unique,
    TensorRT's separator characters replaced, signal/wait layers dropped)."""
    with open(path) as f:
        graph = json.load(f)
    if not isinstance(graph, dict):
        raise ValueError(f"File {path} does not conform to the expected JSON format.")
    layers, bindings = graph["Layers"], graph.get("Bindings", [])
    if not isinstance(layers, list) or not isinstance(layers[0], dict):
        raise ValueError(f"File {path} does not conform to the expected JSON format.\n"
                         "Make sure to enable detailed ProfilingVerbosity when building "
                         "the engine.")
    for raw in layers:
        raw["Name"] = raw["Name"].replace("\x1e", "+").replace("\x1f", "+")
        if "Metadata" in raw:
            raw["Metadata"] = raw["Metadata"].replace("\x1e", "+").replace("\x1f", "+")
    layers = [raw for raw in layers if raw["LayerType"] not in ("signal", "wait")]
    seen: dict[str, int] = {}
    for raw in layers:
        if raw["Name"] in seen:
            seen[raw["Name"]] += 1
            raw["Name"] += f"_{seen[raw['Name']]}"
        else:
            seen[raw["Name"]] = 1
    in_profile = [raw for raw in layers if not re.search(r"\[profile +[0-9]\]", raw["Name"])]
    bindings = [b for b in bindings if not re.search(r"\[profile +[0-9]\]", b)]
    if not in_profile or not bindings:
        raise ValueError("Something went wrong went filtering layers from the provided profile")
    return in_profile, bindings


def read_profiling_file(path: str) -> list[dict[str, Any]]:
    """parser.read_profiling_file: records with 4 or 5 keys (the count record is dropped)."""
    with open(path) as f:
        return [rec for rec in json.load(f) if len(rec) in (4, 5)]


def engine_plan(graph_path: str, profile_path: str) -> list[dict[str, Any]]:
    """engine_plan.EnginePlan's table: one row per layer (Constant and NoOp layers left out),
    with the profile's columns joined by position when the counts agree, else by name."""
    raw_layers, _ = read_graph_file(graph_path)
    raw_layers = [r for r in raw_layers if r["LayerType"] != "shape_call"]
    ignore = {r["Name"] for r in raw_layers if r["LayerType"] in ("Constant", "NoOp")}
    rows = [layer(r) for r in raw_layers if r["LayerType"] not in ("Constant", "NoOp")]
    perf = [p for p in read_profiling_file(profile_path) if p["name"] not in ignore]
    columns = {"percentage": "latency.pct_time", "averageMs": "latency.avg_time",
               "medianMs": "latency.median_time", "timeMs": "latency.time"}
    by_name = {p["name"]: p for p in perf}
    for i, row in enumerate(rows):
        rec = perf[i] if len(perf) == len(rows) else by_name.get(row["name"], {})
        for key, column in columns.items():
            row[column] = rec.get(key, 0)
        row["profile_name"] = rec.get("name")
    return rows
