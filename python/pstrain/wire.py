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


# -- Pull and push messages without protobuf for the payloads -------------
#
# The client sends and receives Push and Pull messages as raw bytes (its
# channels' identity (de)serializers): a pull's chunk payloads are sliced
# out of the received message (memoryviews, no copy) and decoded once into
# the parameters, and a push message is one join of its small protobuf
# framing with the gradients' own buffers (one copy). The layout is
# proto/pstrain.proto's: PullResponse {1: version, 2: min_clock,
# 3: ChunkData chunks}, PushRequest {1: PushHeader header, 2: ChunkData
# chunks}, ChunkData {1: tensor, 2: index, 3: dtype, 4: shape (packed),
# 5: data}. Unknown fields are skipped, as protobuf does.

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


class WireFormatError(ValueError):
    """A message that is not valid protobuf of the expected layout."""


def _read_varint(buf, pos, end):
    result = 0
    shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            break
    raise WireFormatError("truncated or overlong varint")


def _fields(buf, pos, end):
    """Yields (field number, wire type, value, start, stop) of the fields
    in buf[pos:end]: for a length-delimited field value is None and
    [start, stop) its bytes; otherwise value is the number."""
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, kind = key >> 3, key & 7
        if kind == _VARINT:
            value, pos = _read_varint(buf, pos, end)
            yield field, kind, value, pos, pos
        elif kind == _LEN:
            n, pos = _read_varint(buf, pos, end)
            if n > end - pos:
                raise WireFormatError(f"field {field}: {n} bytes past the end")
            yield field, kind, None, pos, pos + n
            pos += n
        elif kind in (_FIXED64, _FIXED32):
            size = 8 if kind == _FIXED64 else 4
            if size > end - pos:
                raise WireFormatError(f"field {field}: truncated")
            yield field, kind, int.from_bytes(buf[pos:pos + size], "little"), pos, pos
            pos += size
        else:
            raise WireFormatError(f"field {field}: unsupported wire type {kind}")
    if pos != end:
        raise WireFormatError("field runs past its message")


class RawChunk:
    """A ChunkData whose payload `data` is a memoryview into the message."""

    __slots__ = ("tensor", "index", "dtype", "data")

    def __init__(self):
        self.tensor, self.index, self.dtype, self.data = "", 0, 0, b""


def parse_pull_response(msg):
    """(version, min_clock, [RawChunk]) of a serialized PullResponse; the
    chunks' data are views of `msg` (bytes), valid while it lives."""
    view = memoryview(msg)
    version = min_clock = 0
    chunks = []
    for field, kind, value, start, stop in _fields(msg, 0, len(msg)):
        if field == 1 and kind == _VARINT:
            version = value
        elif field == 2 and kind == _VARINT:
            min_clock = value
        elif field == 3 and kind == _LEN:
            c = RawChunk()
            for f, k, v, s, e in _fields(msg, start, stop):
                if f == 1 and k == _LEN:
                    try:
                        c.tensor = str(view[s:e], "utf-8")
                    except UnicodeDecodeError:
                        raise WireFormatError("chunk tensor name is not UTF-8") from None
                elif f == 2 and k == _VARINT:
                    c.index = v & 0xFFFFFFFF
                elif f == 3 and k == _VARINT:
                    c.dtype = v
                elif f == 5 and k == _LEN:
                    c.data = view[s:e]
            chunks.append(c)
    return version, min_clock, chunks


def _varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def chunk_framing(tensor, index, dtype, length, payload_bytes):
    """The bytes of a ChunkData before its payload (fields 1-4 and field 5's
    key and length): framing + payload is the serialized ChunkData."""
    name = tensor.encode("utf-8")
    shape = _varint(length)
    head = b"".join([
        b"\x0a", _varint(len(name)), name,
        b"\x10" + _varint(index) if index else b"",
        b"\x18" + _varint(dtype) if dtype else b"",
        b"\x22", _varint(len(shape)), shape,
        b"\x2a", _varint(payload_bytes)])
    return head


def push_request(header, chunks):
    """A serialized PushRequest: `header` (a serialized PushHeader, or None
    for a stream's later messages) and `chunks`, pairs (framing from
    chunk_framing, payload: any contiguous buffer, e.g. a numpy array), in
    one copy of the payloads."""
    parts = []
    if header is not None:
        parts += [b"\x0a", _varint(len(header)), header]
    for framing, payload in chunks:
        size = len(framing) + memoryview(payload).nbytes
        parts += [b"\x12", _varint(size), framing, payload]
    return b"".join(parts)


def payload(x, dtype):
    """The wire payload of the fp32 array `x` (1-D) as a buffer: for fp32
    the array itself when it is contiguous little-endian (no copy), else
    encode()'s bytes."""
    if dtype == pb.DTYPE_F32:
        return np.ascontiguousarray(x, dtype="<f4")
    return encode(x, dtype)
