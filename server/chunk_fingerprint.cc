#include "server/chunk_fingerprint.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/hash/hash.h"
#include "common/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>  // AVX-512 and VPCLMULQDQ
#include <nmmintrin.h>  // SSE4.2 (and SSE4.1's pmaxud)
#endif

namespace pstrain {
namespace crc32c {
namespace {

// The reflected Castagnoli polynomial.
constexpr uint32_t kPolynomial = 0x82f63b78u;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) {
      c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    }
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

// The register form (no pre/post inversion), as the crc32 instruction has it.
uint32_t TableUpdate(uint32_t c, const char* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    c = kTable[(c ^ static_cast<uint8_t>(data[i])) & 0xff] ^ (c >> 8);
  }
  return c;
}

// Where the parts start: part 0 at 0, part 1 at `third`, part 2 at
// 2 * `third` (to the end); `third` is a multiple of 8 bytes.
size_t Third(size_t len) { return len / 24 * 8; }

#if defined(__x86_64__)
// The three parts' chains are independent, so the crc32 instructions
// (latency 3, one per cycle) overlap.
__attribute__((target("sse4.2"))) Parts Sse42Impl(const char* data,
                                                  size_t len) {
  const size_t third = Third(len);
  const char* p0 = data;
  const char* p1 = data + third;
  const char* p2 = data + 2 * third;
  uint64_t c0 = 0xffffffffu, c1 = 0xffffffffu, c2 = 0xffffffffu;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t w0, w1, w2;
    std::memcpy(&w0, p0 + i, 8);
    std::memcpy(&w1, p1 + i, 8);
    std::memcpy(&w2, p2 + i, 8);
    c0 = _mm_crc32_u64(c0, w0);
    c1 = _mm_crc32_u64(c1, w1);
    c2 = _mm_crc32_u64(c2, w2);
  }
  const char* q = data + 3 * third;  // the rest of part 2
  size_t rest = len - 3 * third;
  for (; rest >= 8; rest -= 8, q += 8) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    c2 = _mm_crc32_u64(c2, w);
  }
  uint32_t c = static_cast<uint32_t>(c2);
  for (; rest > 0; --rest, ++q) c = _mm_crc32_u8(c, static_cast<uint8_t>(*q));
  return Parts{{~static_cast<uint32_t>(c0), ~static_cast<uint32_t>(c1), ~c}};
}

// 32 bytes of one part: their largest |x| into *m (the 32-bit lanes' max)
// and their CRC into *c, loaded once for the max and read again from L1.
__attribute__((target("sse4.2"))) inline void Scan32(const char* q,
                                                     __m128i abs_mask,
                                                     __m128i* m, uint64_t* c) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
  *m = _mm_max_epu32(*m, _mm_and_si128(a, abs_mask));
  *m = _mm_max_epu32(*m, _mm_and_si128(b, abs_mask));
  for (int j = 0; j < 4; ++j) {
    uint64_t w;
    std::memcpy(&w, q + 8 * j, 8);
    *c = _mm_crc32_u64(*c, w);
  }
}

// ScanImpl's words from offset `i` of each part on (a multiple of 8), with
// the CRCs `c` and the largest |x| `max_bits` of the bytes before it.
__attribute__((target("sse4.2"))) inline Parts ScanTail(
    const char* data, size_t len, size_t third, size_t i, uint64_t c[3],
    uint32_t max_bits, uint32_t* max_abs_bits) {
  const char* p[3] = {data, data + third, data + 2 * third};
  auto scan = [&max_bits](uint64_t w) {
    const uint32_t lo = static_cast<uint32_t>(w) & 0x7fffffffu;
    const uint32_t hi = static_cast<uint32_t>(w >> 32) & 0x7fffffffu;
    max_bits = std::max(max_bits, std::max(lo, hi));
  };
  for (; i < third; i += 8) {  // the parts' last words
    for (int l = 0; l < 3; ++l) {
      uint64_t w;
      std::memcpy(&w, p[l] + i, 8);
      c[l] = _mm_crc32_u64(c[l], w);
      scan(w);
    }
  }
  const char* q = data + 3 * third;  // the rest of part 2
  size_t rest = len - 3 * third;
  for (; rest >= 8; rest -= 8, q += 8) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    c[2] = _mm_crc32_u64(c[2], w);
    scan(w);
  }
  uint32_t c2 = static_cast<uint32_t>(c[2]);
  if (rest >= 4) {
    uint32_t w;
    std::memcpy(&w, q, 4);
    c2 = _mm_crc32_u32(c2, w);
    max_bits = std::max(max_bits, w & 0x7fffffffu);
    rest -= 4;
    q += 4;
  }
  for (; rest > 0; --rest, ++q) {
    c2 = _mm_crc32_u8(c2, static_cast<uint8_t>(*q));
  }
  *max_abs_bits = max_bits;
  return Parts{
      {~static_cast<uint32_t>(c[0]), ~static_cast<uint32_t>(c[1]), ~c2}};
}

// Sse42Impl with MaxAbsBits in the same loop: each 32 bytes of a part are
// loaded once for the vector max and read again from L1 for the CRC.
__attribute__((target("sse4.2"))) Parts Sse42ScanImpl(const char* data,
                                                      size_t len,
                                                      uint32_t* max_abs_bits) {
  const size_t third = Third(len);
  const char* p[3] = {data, data + third, data + 2 * third};
  uint64_t c[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  __m128i m[3] = {_mm_setzero_si128(), _mm_setzero_si128(),
                  _mm_setzero_si128()};
  size_t i = 0;
  for (; i + 32 <= third; i += 32) {
    for (int l = 0; l < 3; ++l) Scan32(p[l] + i, abs_mask, &m[l], &c[l]);
  }
  uint32_t lanes[4];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes),
                   _mm_max_epu32(m[0], _mm_max_epu32(m[1], m[2])));
  const uint32_t max_bits =
      std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  return ScanTail(data, len, third, i, c, max_bits, max_abs_bits);
}

// Sse42ScanImpl with the CRCs of each part's whole 64-byte blocks folded
// with carry-less multiplies (VPCLMULQDQ on 512-bit registers: four 128-bit
// lanes, each block folded into the running remainder 512 bits on), the
// three parts' chains interleaved, then the crc32 instruction for the rest.
// The folding keeps the remainder congruent to the part's bytes so far, so
// the CRC of the final 128 bits is the part's CRC (Intel, "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ", 2009; the
// constants are x^(D+32) and x^(D-32) mod the polynomial, bit-reflected and
// shifted left by one, for fold distances D = 512 and 128).
#define PSTRAIN_AVX512_CRC \
  __attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))
PSTRAIN_AVX512_CRC inline __m512i Fold512(__m512i acc, __m512i k,
                                          __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00),
                                   _mm512_clmulepi64_epi128(acc, k, 0x11), data,
                                   0x96);  // a ^ b ^ c
}

PSTRAIN_AVX512_CRC inline uint64_t Reduce512(__m512i acc) {
  const __m128i k = _mm_set_epi64x(0x14cd00bd6, 0xf20c0dfe);
  __m128i x = _mm512_extracti32x4_epi32(acc, 0);
  const __m128i lanes[3] = {_mm512_extracti32x4_epi32(acc, 1),
                            _mm512_extracti32x4_epi32(acc, 2),
                            _mm512_extracti32x4_epi32(acc, 3)};
  for (const __m128i& lane : lanes) {
    x = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                    _mm_clmulepi64_si128(x, k, 0x11)),
                      lane);
  }
  uint64_t crc = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(x)));
  return _mm_crc32_u64(crc, static_cast<uint64_t>(_mm_extract_epi64(x, 1)));
}

// Folds blocks [from, to) of the three parts at `p` into `acc` (block 0
// starts each remainder: the initial CRC, all ones, xored into the part's
// first four bytes) and the largest |x| of their floats into *m.
PSTRAIN_AVX512_CRC inline void FoldBlocks(const char* const p[3], size_t from,
                                          size_t to, __m512i acc[3],
                                          __m512i* m) {
  const __m512i k =
      _mm512_set_epi64(0x9e4addf8, 0x740eef02, 0x9e4addf8, 0x740eef02,
                       0x9e4addf8, 0x740eef02, 0x9e4addf8, 0x740eef02);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i init = _mm512_zextsi128_si512(_mm_cvtsi32_si128(-1));
  for (size_t b = from; b < to; ++b) {
    for (int l = 0; l < 3; ++l) {
      const __m512i d = _mm512_loadu_si512(p[l] + 64 * b);
      *m = _mm512_max_epu32(*m, _mm512_and_si512(d, abs_mask));
      acc[l] = b == 0 ? _mm512_xor_si512(d, init) : Fold512(acc[l], k, d);
    }
  }
}

PSTRAIN_AVX512_CRC Parts Avx512ScanImpl(const char* data, size_t len,
                                        uint32_t* max_abs_bits) {
  const size_t third = Third(len);
  const size_t blocks = third / 64;
  if (blocks < 2) return Sse42ScanImpl(data, len, max_abs_bits);
  const char* const p[3] = {data, data + third, data + 2 * third};
  __m512i acc[3];
  __m512i m = _mm512_setzero_si512();
  FoldBlocks(p, 0, blocks, acc, &m);
  uint64_t c[3];
  for (int l = 0; l < 3; ++l) c[l] = Reduce512(acc[l]);
  return ScanTail(data, len, third, 64 * blocks, c, _mm512_reduce_max_epu32(m),
                  max_abs_bits);
}
#endif

// Bytes of `pieces` from a position on, copied out in order.
class PieceReader {
 public:
  PieceReader(absl::Span<const absl::string_view> pieces, size_t pos)
      : pieces_(pieces) {
    while (piece_ < pieces_.size() && pos >= pieces_[piece_].size()) {
      pos -= pieces_[piece_].size();
      ++piece_;
    }
    offset_ = pos;
  }

  // The next `n` bytes to `dst` (the pieces must hold them).
  void Copy(char* dst, size_t n) {
    while (n > 0) {
      const absl::string_view p = pieces_[piece_];
      const size_t take = std::min(n, p.size() - offset_);
      std::memcpy(dst, p.data() + offset_, take);
      dst += take;
      n -= take;
      offset_ += take;
      while (piece_ < pieces_.size() && offset_ == pieces_[piece_].size()) {
        offset_ = 0;
        ++piece_;
      }
    }
  }

 private:
  absl::Span<const absl::string_view> pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
};

// Bytes of each part copied to `dst` at a time, then scanned from L1 (three
// parts: 12 KiB).
constexpr size_t kStageBytes = 4096;

#if defined(__x86_64__)
// Sse42ScanImpl over bytes gathered from `pieces` into `dst` a stage at a
// time: the parts' CRCs run over the same 8-byte words in the same order,
// and the largest |x| over the same floats, so the result is Sse42ScanImpl's
// on the gathered bytes.
__attribute__((target("sse4.2"))) Parts Sse42GatherScanImpl(
    absl::Span<const absl::string_view> pieces, size_t len, char* dst,
    uint32_t* max_abs_bits) {
  const size_t third = Third(len);
  char* p[3] = {dst, dst + third, dst + 2 * third};
  PieceReader readers[3] = {PieceReader(pieces, 0), PieceReader(pieces, third),
                            PieceReader(pieces, 2 * third)};
  uint64_t c[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  __m128i m[3] = {_mm_setzero_si128(), _mm_setzero_si128(),
                  _mm_setzero_si128()};
  uint32_t max_bits = 0;
  auto scan = [&max_bits](uint64_t w) {
    const uint32_t lo = static_cast<uint32_t>(w) & 0x7fffffffu;
    const uint32_t hi = static_cast<uint32_t>(w >> 32) & 0x7fffffffu;
    max_bits = std::max(max_bits, std::max(lo, hi));
  };
  size_t i = 0;
  while (i < third) {
    const size_t end = std::min(third, i + kStageBytes);
    for (int l = 0; l < 3; ++l) readers[l].Copy(p[l] + i, end - i);
    for (; i + 32 <= end; i += 32) {
      for (int l = 0; l < 3; ++l) Scan32(p[l] + i, abs_mask, &m[l], &c[l]);
    }
    for (; i < end; i += 8) {  // a stage's last words (the parts' last ones)
      for (int l = 0; l < 3; ++l) {
        uint64_t w;
        std::memcpy(&w, p[l] + i, 8);
        c[l] = _mm_crc32_u64(c[l], w);
        scan(w);
      }
    }
  }
  uint32_t lanes[4];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes),
                   _mm_max_epu32(m[0], _mm_max_epu32(m[1], m[2])));
  max_bits = std::max(max_bits, std::max(std::max(lanes[0], lanes[1]),
                                         std::max(lanes[2], lanes[3])));
  char* q = dst + 3 * third;  // the rest of part 2
  size_t rest = len - 3 * third;
  readers[2].Copy(q, rest);
  for (; rest >= 8; rest -= 8, q += 8) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    c[2] = _mm_crc32_u64(c[2], w);
    scan(w);
  }
  uint32_t c2 = static_cast<uint32_t>(c[2]);
  if (rest >= 4) {
    uint32_t w;
    std::memcpy(&w, q, 4);
    c2 = _mm_crc32_u32(c2, w);
    max_bits = std::max(max_bits, w & 0x7fffffffu);
    rest -= 4;
    q += 4;
  }
  for (; rest > 0; --rest, ++q) {
    c2 = _mm_crc32_u8(c2, static_cast<uint8_t>(*q));
  }
  *max_abs_bits = max_bits;
  return Parts{
      {~static_cast<uint32_t>(c[0]), ~static_cast<uint32_t>(c[1]), ~c2}};
}

// Avx512ScanImpl over bytes gathered from `pieces` into `dst` a stage at a
// time: each stage's whole 64-byte blocks are folded while they are in L1,
// in the same order and with the same constants, and the words after the
// last whole block go through ScanTail from `dst`, so the result is
// Avx512ScanImpl's on the gathered bytes.
PSTRAIN_AVX512_CRC Parts
Avx512GatherScanImpl(absl::Span<const absl::string_view> pieces, size_t len,
                     char* dst, uint32_t* max_abs_bits) {
  const size_t third = Third(len);
  const size_t blocks = third / 64;
  if (blocks < 2) return Sse42GatherScanImpl(pieces, len, dst, max_abs_bits);
  static_assert(kStageBytes % 64 == 0, "stages hold whole blocks");
  char* const p[3] = {dst, dst + third, dst + 2 * third};
  PieceReader readers[3] = {PieceReader(pieces, 0), PieceReader(pieces, third),
                            PieceReader(pieces, 2 * third)};
  __m512i acc[3];
  __m512i m = _mm512_setzero_si512();
  size_t folded = 0;  // blocks of each part
  for (size_t i = 0; i < third;) {
    const size_t end = std::min(third, i + kStageBytes);
    for (int l = 0; l < 3; ++l) readers[l].Copy(p[l] + i, end - i);
    const size_t stage_blocks = std::min(blocks, end / 64);
    FoldBlocks(p, folded, stage_blocks, acc, &m);
    folded = stage_blocks;
    i = end;
  }
  readers[2].Copy(dst + 3 * third, len - 3 * third);  // the rest of part 2
  uint64_t c[3];
  for (int l = 0; l < 3; ++l) c[l] = Reduce512(acc[l]);
  return ScanTail(dst, len, third, 64 * blocks, c, _mm512_reduce_max_epu32(m),
                  max_abs_bits);
}
#undef PSTRAIN_AVX512_CRC
#endif

}  // namespace

bool HasSse42() {
#if defined(__x86_64__)
  static const bool sse42 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return sse42;
#else
  return false;
#endif
}

bool HasAvx512Crc() {
#if defined(__x86_64__)
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return CpuHasAvx512() && HasSse42() &&
           __builtin_cpu_supports("pclmul") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0;
  }();
  return avx512;
#else
  return false;
#endif
}

uint32_t Crc32c(uint32_t crc, const char* data, size_t len) {
  return ~TableUpdate(~crc, data, len);
}

Parts PortableParts(const char* data, size_t len) {
  const size_t third = Third(len);
  return Parts{{Crc32c(0, data, third), Crc32c(0, data + third, third),
                Crc32c(0, data + 2 * third, len - 2 * third)}};
}

Parts Sse42Parts(const char* data, size_t len) {
#if defined(__x86_64__)
  return Sse42Impl(data, len);
#else
  return PortableParts(data, len);
#endif
}

Parts PortableScanParts(const char* data, size_t len, uint32_t* max_abs_bits) {
  uint32_t max_bits = 0;
  for (size_t i = 0; i + 4 <= len; i += 4) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    max_bits = std::max(max_bits, bits & 0x7fffffffu);
  }
  *max_abs_bits = max_bits;
  return PortableParts(data, len);
}

Parts Sse42ScanParts(const char* data, size_t len, uint32_t* max_abs_bits) {
#if defined(__x86_64__)
  return Sse42ScanImpl(data, len, max_abs_bits);
#else
  return PortableScanParts(data, len, max_abs_bits);
#endif
}

Parts Avx512ScanParts(const char* data, size_t len, uint32_t* max_abs_bits) {
#if defined(__x86_64__)
  return Avx512ScanImpl(data, len, max_abs_bits);
#else
  return PortableScanParts(data, len, max_abs_bits);
#endif
}

Parts PortableGatherScanParts(absl::Span<const absl::string_view> pieces,
                              size_t len, char* dst, uint32_t* max_abs_bits) {
  PieceReader(pieces, 0).Copy(dst, len);
  return PortableScanParts(dst, len, max_abs_bits);
}

Parts Sse42GatherScanParts(absl::Span<const absl::string_view> pieces,
                           size_t len, char* dst, uint32_t* max_abs_bits) {
#if defined(__x86_64__)
  return Sse42GatherScanImpl(pieces, len, dst, max_abs_bits);
#else
  return PortableGatherScanParts(pieces, len, dst, max_abs_bits);
#endif
}

Parts Avx512GatherScanParts(absl::Span<const absl::string_view> pieces,
                            size_t len, char* dst, uint32_t* max_abs_bits) {
#if defined(__x86_64__)
  return Avx512GatherScanImpl(pieces, len, dst, max_abs_bits);
#else
  return PortableGatherScanParts(pieces, len, dst, max_abs_bits);
#endif
}

uint64_t FromParts(size_t len, const Parts& parts) {
  return absl::HashOf(len, parts.crc[0], parts.crc[1], parts.crc[2]);
}

}  // namespace crc32c

uint64_t PayloadFingerprint(const char* data, size_t len) {
  return crc32c::FromParts(len, crc32c::HasSse42()
                                    ? crc32c::Sse42Parts(data, len)
                                    : crc32c::PortableParts(data, len));
}

uint64_t ScanFingerprint(const char* data, size_t len, uint32_t* max_abs_bits) {
  return crc32c::FromParts(
      len, crc32c::HasAvx512Crc()
               ? crc32c::Avx512ScanParts(data, len, max_abs_bits)
           : crc32c::HasSse42()
               ? crc32c::Sse42ScanParts(data, len, max_abs_bits)
               : crc32c::PortableScanParts(data, len, max_abs_bits));
}

void GatherPieces(absl::Span<const absl::string_view> pieces, size_t len,
                  char* dst) {
  crc32c::PieceReader(pieces, 0).Copy(dst, len);
}

uint64_t GatherScanFingerprint(absl::Span<const absl::string_view> pieces,
                               size_t len, char* dst, uint32_t* max_abs_bits) {
  return crc32c::FromParts(
      len,
      crc32c::HasAvx512Crc()
          ? crc32c::Avx512GatherScanParts(pieces, len, dst, max_abs_bits)
      : crc32c::HasSse42()
          ? crc32c::Sse42GatherScanParts(pieces, len, dst, max_abs_bits)
          : crc32c::PortableGatherScanParts(pieces, len, dst, max_abs_bits));
}

}  // namespace pstrain
