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


# -- Messages by hand ---------------------------------------------------------
#
# The pull and push messages of the shard client are built and read here at
# the protobuf wire-format level (https://protobuf.dev/programming-guides/
# encoding/), so that chunk payloads go between the numpy arrays and gRPC's
# message bytes in one copy each way: a push message is one bytes.join of
# its precomputed framing and memoryviews of the gradients; a pull message's
# payloads are read as memoryview slices of the received bytes straight into
# the parameters. Through protobuf each 4 MiB payload was copied three to
# four times more, each copy into fresh memory (docs/python.md, "Speed").
# Field numbers are those of proto/pstrain.proto; wire_test in
# tests/python/api_test.py checks both directions against protobuf itself.

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

# PushRequest: header = 1, chunks = 2. PullResponse: version = 1,
# min_clock = 2, chunks = 3. ChunkData: tensor = 1, index = 2, dtype = 3,
# shape = 4 (packed), data = 5.
_PUSH_HEADER_KEY = bytes([1 << 3 | _LEN])
_PUSH_CHUNK_KEY = bytes([2 << 3 | _LEN])


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(key, body):
    return key + _varint(len(body)) + body


class MalformedMessage(ValueError):
    """A received message that is not a valid PullResponse."""


def chunk_frame(tensor, index, dtype, length):
    """The bytes of a PushRequest's `chunks` entry (ChunkData of `length`
    elements of `dtype`) that precede its payload: the entry's key and
    length, the chunk's fields in field order and data's key and length, as
    protobuf serializes them (proto3: zero scalars omitted, shape packed)."""
    nbytes = length * ELEMENT_BYTES[dtype]
    body = _len_field(bytes([1 << 3 | _LEN]), tensor.encode())
    if index:
        body += bytes([2 << 3 | _VARINT]) + _varint(index)
    if dtype:
        body += bytes([3 << 3 | _VARINT]) + _varint(dtype)
    body += _len_field(bytes([4 << 3 | _LEN]), _varint(length))
    if nbytes:
        body += bytes([5 << 3 | _LEN]) + _varint(nbytes)
    return _PUSH_CHUNK_KEY + _varint(len(body) + nbytes) + body


def push_header_frame(header):
    """The PushRequest bytes of its `header` field (a pb.PushHeader)."""
    return _len_field(_PUSH_HEADER_KEY, header.SerializeToString())


def payload(x, dtype):
    """The payload of the fp32 array `x` (1-D) on a wire of `dtype`, for
    bytes.join: for fp32 a view of `x` itself when it is contiguous
    little-endian fp32 (no copy), else encode()'s bytes."""
    if dtype == pb.DTYPE_F32:
        return memoryview(np.ascontiguousarray(x, dtype="<f4")).cast("B")
    return encode(x, dtype)


def _read_varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise MalformedMessage("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise MalformedMessage("varint longer than 10 bytes")


def _fields(buf, pos, end):
    """(field, wire type, value, pos after) of each field in buf[pos:end]:
    value is the integer of a varint, the (start, end) span of a
    length-delimited field, None for fixed 32/64-bit fields (skipped)."""
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, kind = key >> 3, key & 7
        if field == 0:
            raise MalformedMessage("field number 0")
        if kind == _VARINT:
            value, pos = _read_varint(buf, pos, end)
        elif kind == _LEN:
            n, pos = _read_varint(buf, pos, end)
            if n > end - pos:
                raise MalformedMessage(f"field {field}: {n} bytes, "
                                       f"{end - pos} left")
            value = (pos, pos + n)
            pos += n
        elif kind == _I64 or kind == _I32:
            value = None
            pos += 8 if kind == _I64 else 4
            if pos > end:
                raise MalformedMessage(f"field {field}: truncated")
        else:
            raise MalformedMessage(f"field {field}: wire type {kind}")
        yield field, kind, value


class RawChunk:
    """A ChunkData read from received bytes: `data` is a memoryview of
    them (no copy)."""

    __slots__ = ("tensor", "index", "dtype", "shape", "data")

    def __init__(self):
        self.tensor = ""
        self.index = 0
        self.dtype = 0
        self.shape = []
        self.data = memoryview(b"")


def _read_chunk(view, start, end):
    c = RawChunk()
    for field, kind, value in _fields(view, start, end):
        if field == 1 and kind == _LEN:
            try:
                c.tensor = str(view[value[0]:value[1]], "utf-8")
            except UnicodeDecodeError:
                raise MalformedMessage("tensor name is not UTF-8") from None
        elif field == 2 and kind == _VARINT:
            c.index = value & 0xFFFFFFFF
        elif field == 3 and kind == _VARINT:
            c.dtype = value
        elif field == 4 and kind == _LEN:  # packed
            pos, stop = value
            while pos < stop:
                n, pos = _read_varint(view, pos, stop)
                c.shape.append(n)
        elif field == 4 and kind == _VARINT:  # unpacked
            c.shape.append(value)
        elif field == 5 and kind == _LEN:
            c.data = view[value[0]:value[1]]
    return c


def parse_pull_response(data):
    """(version, min_clock, [RawChunk]) of the serialized PullResponse
    `data` (bytes). As protobuf's parser: unknown fields, and known ones of
    another wire type, are skipped; the last of a non-repeated field wins.
    Raises MalformedMessage on a truncated or malformed message (and on
    groups and field number 0, which no proto3 writer sends)."""
    view = memoryview(data)
    version = min_clock = 0
    chunks = []
    for field, kind, value in _fields(view, 0, len(view)):
        if field == 1 and kind == _VARINT:
            version = value
        elif field == 2 and kind == _VARINT:
            min_clock = value
        elif field == 3 and kind == _LEN:
            chunks.append(_read_chunk(view, value[0], value[1]))
    return version, min_clock, chunks
