// The fingerprint of a pushed chunk's payload (server/shard.h, "Pushes are
// idempotent"): what tells a retry or a stand-in's re-push of the same bytes
// from a different push of the same worker and clock.
//
// What it is for, and why 32-bit CRCs are enough. The fingerprint is kept
// in memory only (Shard's LastPush and each chunk's Contribution; never
// checkpointed or sent), is compared only between pushes of one worker for
// one clock and one chunk position, and never decides which bytes are
// summed: the first accepted bytes stand either way. A collision can only
// turn the FAILED_PRECONDITION that a *different* push for an accepted clock
// gets into the answer a retry gets (the first push's result, nothing
// changed). Such a push comes from a client bug or a non-deterministic
// stand-in, not from an adversary (a worker holding the job token can push
// anything anyway), so what matters is the chance that an accidental
// difference goes unseen:
// - The payload is cut into three contiguous parts (the last one takes the
//   remainder), each with its own standard CRC32C (Castagnoli, reflected,
//   init and final xor ~0), and the three CRCs and the byte length are
//   hashed into 64 bits (absl::HashOf).
// - A CRC is linear: two payloads of one length collide in a part exactly
//   when their difference in that part is a multiple of the CRC polynomial.
//   So every difference confined to 32 consecutive bits (one burst, e.g. one
//   flipped bit or one changed float) is always detected, and a difference
//   that is "random" (a recomputed gradient) goes unseen with probability
//   about 2^-32 per part it touches, i.e. 2^-96 when it touches all three.
// - A push's fingerprint sums every chunk's: a recomputed gradient differs
//   in every chunk, so a whole push collides with probability ~2^-64 (the
//   64-bit sum), not 2^-32; a difference in one part of one chunk is the
//   worst case, 2^-32.
// The previous fingerprint (absl::HashOf over the bytes, LowLevelHash) had
// ~2^-64 for every difference but read about 5 GB/s here; CRC32C on three
// interleaved streams runs close to memory speed (docs/performance.md,
// "Fewer passes over pushed bytes").
//
// The CRCs use SSE4.2's crc32 instruction when the CPU has it (a plain run
// time check, as in server/fixed_point_kernels.h), otherwise a table;
// ScanFingerprint folds them with VPCLMULQDQ where AVX-512 has it. All give
// the same bits (chunk_fingerprint_test). Stateless and thread-safe.
#ifndef PSTRAIN_SERVER_CHUNK_FINGERPRINT_H_
#define PSTRAIN_SERVER_CHUNK_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pstrain {

// The 64-bit fingerprint of the `len` bytes at `data` (any alignment).
uint64_t PayloadFingerprint(const char* data, size_t len);

// PayloadFingerprint of `len` bytes of little-endian floats and, from the
// same loop over them (one read from memory instead of two), the bits of
// their largest |x| in *max_abs_bits, as fixed_point::MaxAbsBits gives them
// (kNonFiniteBits or more: a NaN or an Inf). Bytes past the last whole
// float are fingerprinted, not scanned.
uint64_t ScanFingerprint(const char* data, size_t len, uint32_t* max_abs_bits);

// ScanFingerprint of the `len` bytes that `pieces` hold in order (their
// sizes sum to `len`; empty pieces allowed), which the same loop copies to
// `dst` (`len` bytes, not overlapping them): a payload left in gRPC's
// slices is read from them once, and the fingerprint and *max_abs_bits are
// what ScanFingerprint(dst, len, ...) gives. A float may straddle pieces.
uint64_t GatherScanFingerprint(absl::Span<const absl::string_view> pieces,
                               size_t len, char* dst, uint32_t* max_abs_bits);

// Copies the `len` bytes that `pieces` hold, in order, to `dst`.
void GatherPieces(absl::Span<const absl::string_view> pieces, size_t len,
                  char* dst);

namespace crc32c {

// The three parts' CRC32C of `len` bytes, as PayloadFingerprint cuts them.
struct Parts {
  uint32_t crc[3];
};
// One build of the part CRCs, for tests and benchmarks that compare them.
using PartsFn = Parts (*)(const char* data, size_t len);

// Whether this CPU runs the SSE4.2 build (what PayloadFingerprint uses).
bool HasSse42();
// The table build (always runnable) and the SSE4.2 build (only when
// HasSse42(); the table build on CPUs other than x86-64).
Parts PortableParts(const char* data, size_t len);
Parts Sse42Parts(const char* data, size_t len);
// The same parts and, in the same loop (SSE4.2) or a second one (table),
// the bits of the largest |x| of the floats, as ScanFingerprint.
Parts PortableScanParts(const char* data, size_t len, uint32_t* max_abs_bits);
Parts Sse42ScanParts(const char* data, size_t len, uint32_t* max_abs_bits);
// Whether this CPU runs the AVX-512 scan (what ScanFingerprint uses then):
// AVX-512 not capped by PSTRAIN_MAX_CPU_ISA (common/cpu_features.h), and
// VPCLMULQDQ. Its CRCs fold each part's 64-byte blocks with carry-less
// multiplies (about 4 times the crc32 instruction's speed here) and give
// the same bits.
bool HasAvx512Crc();
Parts Avx512ScanParts(const char* data, size_t len, uint32_t* max_abs_bits);
// GatherScanFingerprint's parts per build, as the scans': the same bytes
// to `dst`, parts and largest |x| (the AVX-512 one folds each stage's
// 64-byte blocks while they are in L1).
Parts PortableGatherScanParts(absl::Span<const absl::string_view> pieces,
                              size_t len, char* dst, uint32_t* max_abs_bits);
Parts Sse42GatherScanParts(absl::Span<const absl::string_view> pieces,
                           size_t len, char* dst, uint32_t* max_abs_bits);
Parts Avx512GatherScanParts(absl::Span<const absl::string_view> pieces,
                            size_t len, char* dst, uint32_t* max_abs_bits);
// The fingerprint of `len` bytes from their parts.
uint64_t FromParts(size_t len, const Parts& parts);

// The standard CRC32C of `len` bytes continued from `crc` (0 to start), by
// the table; e.g. Crc32c(0, "123456789", 9) == 0xe3069283.
uint32_t Crc32c(uint32_t crc, const char* data, size_t len);

}  // namespace crc32c
}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_FINGERPRINT_H_
