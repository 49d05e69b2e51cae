"""Implicit INT8 quantization (``pydla build --int8``): calibration data, TensorRT's
calibrators and calibration caches, the per-layer precision policy, and Q/DQ insertion.
Read docs/int8.md."""

from pydla.quantization.cache import CalibrationCache, parse_cache, read_cache, write_cache
from pydla.quantization.implicit import Int8Options, quantize_implicitly

__all__ = ["CalibrationCache", "Int8Options", "parse_cache", "quantize_implicitly",
           "read_cache", "write_cache"]
