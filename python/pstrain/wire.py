"""Chunk payloads: fp32 arrays <-> the wire's little-endian bytes (fp32, or
bf16/fp16 with network.wire_dtype), vectorised with numpy, bit for bit as
common/low_precision.h rounds: nearest, ties to even; NaN stays NaN; fp16
saturates finite values beyond its range to +-65504."""

import numpy as np

from pstrain._proto import pb

F16_MAX = np.float32(65504.0)

ELEMENT_BYTES = {pb.DTYPE_F32: 4, pb.DTYPE_BF16: 2, pb.DTYPE_F16: 2}


def _bf16_bits(x):
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4")
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")
    if nan.any():  # quiet NaN with the sign kept
        rounded[nan] = ((u[nan] >> 16) | 0x0040).astype("<u2")
    return rounded


def encode(x, dtype):
    """bytes of the fp32 array `x` (1-D) on a wire of `dtype`."""
    if dtype == pb.DTYPE_F32:
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == pb.DTYPE_BF16:
        return _bf16_bits(x).tobytes()
    if dtype == pb.DTYPE_F16:
        with np.errstate(over="ignore", invalid="ignore"):
            h = np.clip(x, -F16_MAX, F16_MAX, where=np.isfinite(x),
                        out=np.array(x, dtype=np.float32))
            return h.astype("<f2").tobytes()
    raise ValueError(f"unknown wire dtype {dtype}")


def decode_into(data, dtype, out):
    """Decodes payload `data` (bytes) into the fp32 array `out` (1-D)."""
    if dtype == pb.DTYPE_F32:
        out[:] = np.frombuffer(data, dtype="<f4")
    elif dtype == pb.DTYPE_BF16:
        bits = np.frombuffer(data, dtype="<u2").astype("<u4") << 16
        out[:] = bits.view("<f4")
    elif dtype == pb.DTYPE_F16:
        out[:] = np.frombuffer(data, dtype="<f2")
    else:
        raise ValueError(f"unknown wire dtype {dtype}")
