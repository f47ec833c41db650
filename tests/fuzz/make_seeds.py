#!/usr/bin/env python3
"""Writes the seed corpora of the message fuzzers (push_fuzzer, stream_fuzzer,
rows_fuzzer, push_frame_fuzzer)
and the text fuzzers (config_fuzzer, loaders_fuzzer) into corpus/<target>/.

The protobuf messages are encoded by hand (no protobuf module needed); the
framing is fuzz_input.h's: one variant byte, then frames of a 2-byte
little-endian length and a serialized message. Seeds it does not write
(inputs `psctl fuzz` found, added by hand) are kept. Run from anywhere:
    python3 tests/fuzz/make_seeds.py
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(num, value):
    return varint(num << 3) + varint(value)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def chunk(tensor, index, values, dtype=1, shape=None):
    shape = [len(values)] if shape is None else shape
    packed = b"".join(varint(s) for s in shape)
    data = b"".join(struct.pack("<f", v) for v in values)
    return (field_bytes(1, tensor.encode()) + field_varint(2, index) +
            field_varint(3, dtype) + field_bytes(4, packed) + field_bytes(5, data))


def header(worker=0, clock=0, read_version=0, read_min_clock=0, samples=8,
           parts=0):
    return (field_varint(1, worker) + field_varint(2, clock) +
            field_varint(3, read_version) + field_varint(4, read_min_clock) +
            field_varint(5, samples) +
            (field_varint(41, parts) if parts else b""))


def push(hdr=None, chunks=()):
    msg = b"" if hdr is None else field_bytes(1, hdr)
    return msg + b"".join(field_bytes(2, c) for c in chunks)


def pull_response(version=None, min_clock=None, chunks=()):
    msg = b""
    if version is not None:
        msg += field_varint(1, version)
    if min_clock is not None:
        msg += field_varint(2, min_clock)
    return msg + b"".join(field_bytes(3, c) for c in chunks)


def framed(variant, frames):
    out = bytes([variant])
    for f in frames:
        out += struct.pack("<H", len(f)) + f
    return out


def sparse_rows(tensor, ids, values=(), dim=3, dtype=1):
    packed = b"".join(struct.pack("<q", i) for i in ids)
    data = b"".join(struct.pack("<f", v) for v in values)
    return (field_bytes(1, tensor.encode()) + field_bytes(2, packed) +
            field_varint(3, dtype) + field_varint(4, dim) +
            (field_bytes(5, data) if data else b""))


def row_push(hdr=None, rows=()):
    msg = b"" if hdr is None else field_bytes(1, hdr)
    return msg + b"".join(field_bytes(2, r) for r in rows)


def row_pull(worker=0, clock=0, rows=()):
    return (field_varint(1, worker) + field_varint(2, clock) +
            b"".join(field_bytes(5, r) for r in rows))


# Rows of "emb" [64, 3] on shard 0 of two (splitmix64(id) % 2 == 0).
def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


SHARD0_ROWS = [r for r in range(64) if splitmix64(r) % 2 == 0]
SHARD1_ROWS = [r for r in range(64) if splitmix64(r) % 2 == 1]


W0, W1, W2, B0 = ([0.5, -1, 2, 0.25], [1, 1, 1, 1], [3, -3], [0.1, 0.2, 0.3, 0.4])


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    # push_frame_fuzzer: byte 0 places the slice cuts, then one frame.
    frame = push(header(0, 0), [chunk("w", 0, W0), chunk("w", 1, W1)])
    for cuts in (0x00, 0x37, 0x88, 0xf1):
        write("push_frame_fuzzer", f"valid_{cuts:02x}", bytes([cuts]) + frame)
    write("push_frame_fuzzer", "truncated", b"\x55" + frame[:-3])
    write("push_frame_fuzzer", "unknown_fields",
          b"\x46" + field_varint(9, 7) + frame + field_bytes(11, b"abc"))
    write("push_frame_fuzzer", "unpacked_shape", b"\x21" + push(None, [
        field_bytes(1, b"w") + field_varint(4, 2) + field_varint(4, 3) +
        field_bytes(5, b"\0" * 8)]))

    # push_fuzzer: shard 0 of two holds w/0 and w/1.
    shard0 = [chunk("w", 0, W0), chunk("w", 1, W1)]
    for variant in range(6):
        write("push_fuzzer", f"valid_v{variant}",
              framed(variant, [push(header(0, 0), shard0),
                               push(header(1, 0), shard0),
                               push(header(0, 1, 1, 1), shard0)]))
    write("push_fuzzer", "nan", framed(2, [push(header(), [
        chunk("w", 0, [math.nan, 0, 0, 0]), chunk("w", 1, W1)])]))
    write("push_fuzzer", "other_shard", framed(2, [push(header(), [
        chunk("w", 0, W0), chunk("w", 1, W1), chunk("b", 0, B0)])]))
    write("push_fuzzer", "unknown_tensor", framed(1, [push(header(), [
        chunk("v", 0, W0), chunk("w", 1, W1)])]))
    write("push_fuzzer", "wrong_shape", framed(0, [push(header(), [
        chunk("w", 0, W0, shape=[2, 2]), chunk("w", 1, W1[:3])])]))
    write("push_fuzzer", "duplicate", framed(2, [push(header(), [
        chunk("w", 0, W0), chunk("w", 0, W0)])]))
    write("push_fuzzer", "no_samples", framed(2, [push(header(samples=0), shard0)]))
    # Sync: worker 0's push in two parts (pending, then the commit), a part
    # again (a retry), worker 1 in one stream.
    write("push_fuzzer", "parts", framed(0, [
        push(header(0, 0, parts=2), shard0[:1]),
        push(header(0, 0, parts=2), shard0[1:]),
        push(header(0, 0, parts=2), shard0[:1]),
        push(header(1, 0), shard0)]))

    # stream_fuzzer: one shard holds everything; even variants push, odd pull.
    everything = [chunk("w", 0, W0), chunk("w", 1, W1), chunk("w", 2, W2),
                  chunk("b", 0, B0)]
    for variant in (0, 2, 4):
        write("stream_fuzzer", f"push_v{variant}",
              framed(variant, [push(header(), everything[:2]),
                               push(None, everything[2:])]))
    write("stream_fuzzer", "push_no_header",
          framed(4, [push(None, everything)]))
    write("stream_fuzzer", "push_header_last",
          framed(4, [push(None, everything[:2]), push(header(), everything[2:])]))
    write("stream_fuzzer", "pull_ok",
          framed(1, [pull_response(3, 2), pull_response(chunks=everything[:3]),
                     pull_response(chunks=everything[3:])]))
    write("stream_fuzzer", "pull_missing_chunk",
          framed(1, [pull_response(1, 1), pull_response(chunks=everything[:3])]))
    write("stream_fuzzer", "pull_bad_chunk",
          framed(3, [pull_response(1, 1), pull_response(chunks=[
              chunk("w", 7, W0), chunk("b", 0, W2)])]))

    # config_fuzzer: the example job files.
    configs = os.path.join(ROOT, "configs")
    for name in sorted(os.listdir(configs)):
        if name.endswith(".yaml"):
            with open(os.path.join(configs, name)) as f:
                write("config_fuzzer", name, f.read())
    write("config_fuzzer", "bad_key.yaml", "job:\n  wokers: 3\n")
    write("config_fuzzer", "inf.yaml",
          "training:\n  mode: async\n  staleness: inf\n")

    # rows_fuzzer: byte 0 bit 0 async, bit 1 Adam, bit 2 reject at the
    # bound of 4 rows, bit 3 bf16 wire; shard 0 of two holds SHARD0_ROWS.
    a, b, c, d, e = SHARD0_ROWS[:5]
    g2 = [0.5, -1, 2, 0.25, 1, -0.5]
    for variant in range(8):
        write("rows_fuzzer", f"valid_v{variant}", framed(variant, [
            row_pull(0, 0, [sparse_rows("emb", [a, b, a])]),
            row_push(header(0, 0), [sparse_rows("emb", [a, b], g2)]),
            row_push(header(1, 0), [sparse_rows("emb", [b, c], g2)]),
            row_push(header(0, 1), [sparse_rows("emb", [d, e], g2)]),
            row_push(header(1, 1)),
        ]))
    write("rows_fuzzer", "out_of_range", framed(0, [
        row_push(header(), [sparse_rows("emb", [a, 64], g2)])]))
    write("rows_fuzzer", "negative_id", framed(1, [
        row_push(header(), [sparse_rows("emb", [-1], g2[:3])])]))
    write("rows_fuzzer", "duplicate", framed(0, [
        row_push(header(), [sparse_rows("emb", [a], g2[:3]),
                            sparse_rows("emb", [a], g2[:3])])]))
    write("rows_fuzzer", "wrong_width", framed(1, [
        row_push(header(), [sparse_rows("emb", [a, b], g2, dim=2)])]))
    write("rows_fuzzer", "other_shard", framed(0, [
        row_push(header(), [sparse_rows("emb", SHARD1_ROWS[:1], g2[:3])])]))
    write("rows_fuzzer", "past_bound", framed(5, [
        row_push(header(), [sparse_rows("emb", SHARD0_ROWS[:5], g2 * 2 + g2[:3])])]))
    write("rows_fuzzer", "nan", framed(1, [
        row_push(header(), [sparse_rows("emb", [a], [1, math.nan, 2])])]))
    write("rows_fuzzer", "bf16_values", framed(9, [
        row_push(header(), [sparse_rows("emb", [a], [], dtype=2) +
                            field_bytes(5, b"\x80\x3f\x00\x40\x80\xbf")])]))
    write("rows_fuzzer", "unknown_tensor", framed(0, [
        row_pull(0, 0, [sparse_rows("w", [a])]),
        row_push(header(), [sparse_rows("w", [a], g2[:3])])]))
    write("rows_fuzzer", "retry", framed(1, [
        row_push(header(0, 0), [sparse_rows("emb", [a], g2[:3])]),
        row_push(header(0, 0), [sparse_rows("emb", [a], g2[:3])]),
        row_push(header(0, 0), [sparse_rows("emb", [a], g2[3:])])]))

    # loaders_fuzzer: byte 0 picks the parser (0 digits, 1 sklearn csv,
    # 2 csv with header, 3 libsvm).
    with open(os.path.join(ROOT, "worker", "data", "testdata",
                           "digits_5.csv")) as f:
        write("loaders_fuzzer", "digits", "\0" + f.read())
    write("loaders_fuzzer", "sklearn",
          "\1" + "3,2,benign,malignant\n1.5,2,0\n3,4.25,1\n-1,0,1\n")
    write("loaders_fuzzer", "csv",
          "\2" + "age,\"height\",label\n31,1.8,yes\n,NA,no\r\n40,nan,yes\n")
    write("loaders_fuzzer", "csv_numeric",
          "\2" + "a,b,label\n1,2,0\n3,4,1\n")
    write("loaders_fuzzer", "libsvm",
          "\3" + "1 1:0.5 3:2 # comment\n-1\t2:1.5\n\n0 10:1e-3\n")


if __name__ == "__main__":
    main()
