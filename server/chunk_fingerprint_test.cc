#include "server/chunk_fingerprint.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "server/fixed_point_kernels.h"

namespace pstrain {
namespace {

std::string RandomBytes(size_t len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(len, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(Crc32cTest, KnownVectors) {
  // RFC 3720 (iSCSI), B.4, and the usual check value.
  EXPECT_EQ(crc32c::Crc32c(0, "123456789", 9), 0xe3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Crc32c(0, zeros.data(), zeros.size()), 0x8a9136aau);
  const std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Crc32c(0, ones.data(), ones.size()), 0x62a8ab43u);
  // Continuing a CRC is the CRC of the concatenation.
  EXPECT_EQ(crc32c::Crc32c(crc32c::Crc32c(0, "1234", 4), "56789", 5),
            0xe3069283u);
}

TEST(Crc32cTest, PartsAreEachPartsStandardCrc) {
  // 30 bytes: parts of 8, 8 and 14 bytes.
  const std::string s = RandomBytes(30, 1);
  const crc32c::Parts p = crc32c::PortableParts(s.data(), s.size());
  EXPECT_EQ(p.crc[0], crc32c::Crc32c(0, s.data(), 8));
  EXPECT_EQ(p.crc[1], crc32c::Crc32c(0, s.data() + 8, 8));
  EXPECT_EQ(p.crc[2], crc32c::Crc32c(0, s.data() + 16, 14));
}

TEST(Crc32cTest, Sse42BuildMatchesTableBuild) {
  if (!crc32c::HasSse42()) {
    GTEST_SKIP() << "this CPU has no SSE4.2; only the table build runs here";
  }
  const std::string big = RandomBytes((1 << 20) + 64, 2);
  for (size_t len : {0, 1, 7, 8, 23, 24, 25, 47, 48, 100, 1000, 4097, 65536,
                     (1 << 20) + 13}) {
    for (size_t offset : {0, 1, 3, 7}) {  // unaligned starts too
      const char* d = big.data() + offset;
      const crc32c::Parts a = crc32c::Sse42Parts(d, len);
      const crc32c::Parts b = crc32c::PortableParts(d, len);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(a.crc[i], b.crc[i])
            << "len " << len << " offset " << offset << " part " << i;
      }
    }
  }
}

// Floats of every kind: normal, tiny, negative, zeros, and now and then a
// NaN or an Inf (when `specials`).
std::string RandomFloats(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::string s(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = rng();
    if (!specials && (bits & 0x7f800000u) == 0x7f800000u) bits &= 0xbfffffffu;
    std::memcpy(&s[i * 4], &bits, 4);
  }
  return s;
}

TEST(ScanFingerprintTest, SameFingerprintAndLargestAsTheSeparatePasses) {
  for (bool specials : {false, true}) {
    const std::string big = RandomFloats((1 << 18) + 16, 6, specials);
    for (size_t floats :
         {0,  1,  2,   5,   6,   7,   8,    23,   24,   25,           95,
          96, 97, 100, 191, 192, 200, 1000, 1024, 4101, (1 << 18) + 3}) {
      for (size_t offset : {0, 1, 4}) {
        const char* d = big.data() + offset;
        const size_t len = floats * 4;
        const uint32_t want = fixed_point::MaxAbsBits(d, floats);
        uint32_t got = 0xdeadbeef;
        EXPECT_EQ(ScanFingerprint(d, len, &got), PayloadFingerprint(d, len));
        EXPECT_EQ(got, want) << "floats " << floats << " offset " << offset;
        uint32_t portable = 0xdeadbeef;
        const crc32c::Parts p = crc32c::PortableScanParts(d, len, &portable);
        EXPECT_EQ(portable, want);
        if (crc32c::HasSse42()) {
          uint32_t sse = 0xdeadbeef;
          const crc32c::Parts q = crc32c::Sse42ScanParts(d, len, &sse);
          EXPECT_EQ(sse, want) << "floats " << floats << " offset " << offset;
          for (int i = 0; i < 3; ++i) EXPECT_EQ(p.crc[i], q.crc[i]);
        }
        if (crc32c::HasAvx512Crc()) {
          uint32_t avx512 = 0xdeadbeef;
          const crc32c::Parts q = crc32c::Avx512ScanParts(d, len, &avx512);
          EXPECT_EQ(avx512, want)
              << "floats " << floats << " offset " << offset;
          for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(p.crc[i], q.crc[i])
                << "floats " << floats << " offset " << offset;
          }
        }
      }
    }
  }
}

// Cuts `s` into pieces at random places (sizes 0 to `max_piece`, so a
// float or an 8-byte word often straddles two), as gRPC's slices may.
std::vector<absl::string_view> RandomPieces(const std::string& s,
                                            size_t max_piece, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<absl::string_view> pieces;
  size_t at = 0;
  while (at < s.size()) {
    const size_t n = std::min(s.size() - at, rng() % (max_piece + 1));
    pieces.push_back(absl::string_view(s).substr(at, n));
    at += n;
  }
  if (rng() % 2 == 0) pieces.push_back(absl::string_view());
  return pieces;
}

TEST(GatherScanFingerprintTest, SameAsScanFingerprintOfTheGatheredBytes) {
  for (bool specials : {false, true}) {
    const std::string big = RandomFloats((1 << 18) + 16, 8, specials);
    for (size_t floats : {0, 1, 2, 5, 6, 7, 8, 23, 24, 25, 97, 1000, 1024,
                          3 * 1024 + 7, (1 << 18) + 3}) {
      const std::string s = big.substr(0, floats * 4 + floats % 3);
      for (size_t max_piece : {1, 3, 64, 4099, 65536, 1 << 22}) {
        const std::vector<absl::string_view> pieces =
            RandomPieces(s, max_piece, floats + max_piece);
        std::string dst(s.size() + 8, '\x5a');
        uint32_t got = 0xdeadbeef;
        const uint64_t fp =
            GatherScanFingerprint(pieces, s.size(), dst.data() + 1, &got);
        uint32_t want = 0xdeadbeef;
        EXPECT_EQ(fp, ScanFingerprint(s.data(), s.size(), &want))
            << "bytes " << s.size() << " pieces of at most " << max_piece;
        EXPECT_EQ(got, want) << "bytes " << s.size();
        EXPECT_EQ(dst.substr(1, s.size()), s) << "bytes " << s.size();
        EXPECT_EQ(dst[0], '\x5a');  // nothing written outside
        EXPECT_EQ(dst.substr(s.size() + 1), std::string(7, '\x5a'));
        std::string copy(s.size(), '\0');
        GatherPieces(pieces, s.size(), copy.data());
        EXPECT_EQ(copy, s);
      }
    }
  }
}

// Every gather build this CPU runs gives the table build's parts and
// largest |x| of the gathered bytes, and those bytes.
TEST(GatherScanFingerprintTest, BuildsAgree) {
  using GatherFn = crc32c::Parts (*)(absl::Span<const absl::string_view>,
                                     size_t, char*, uint32_t*);
  std::vector<std::pair<const char*, GatherFn>> builds = {
      {"portable", crc32c::PortableGatherScanParts}};
  if (crc32c::HasSse42()) {
    builds.push_back({"sse4.2", crc32c::Sse42GatherScanParts});
  }
  if (crc32c::HasAvx512Crc()) {
    builds.push_back({"avx512", crc32c::Avx512GatherScanParts});
  }
  const std::string big = RandomFloats((1 << 18) + 16, 8, /*specials=*/true);
  // Around the AVX-512 build's bounds: two blocks a part (384 bytes), a
  // stage (4096 bytes a part), several stages and a part's odd tail.
  for (size_t bytes :
       {0, 7, 380, 383, 384, 388, 390, 3 * 4096, 3 * 4096 + 60, 3 * 4096 + 64,
        3 * 4096 + 200, 3 * 8192 + 13, 4 * ((1 << 18) + 3)}) {
    const std::string s = big.substr(0, bytes);
    uint32_t want_max = 0;
    const crc32c::Parts want =
        crc32c::PortableScanParts(s.data(), s.size(), &want_max);
    for (size_t max_piece : {1, 61, 4096, 1 << 22}) {
      const std::vector<absl::string_view> pieces =
          RandomPieces(s, max_piece, bytes + max_piece);
      for (const auto& [name, fn] : builds) {
        std::string dst(s.size(), '\0');
        uint32_t got_max = 0xdeadbeef;
        const crc32c::Parts got = fn(pieces, s.size(), dst.data(), &got_max);
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(got.crc[i], want.crc[i])
              << name << " bytes " << bytes << " pieces " << max_piece;
        }
        EXPECT_EQ(got_max, want_max) << name << " bytes " << bytes;
        EXPECT_EQ(dst, s) << name << " bytes " << bytes;
      }
    }
  }
}

TEST(ScanFingerprintTest, FindsOneNaNOrInfOrLargestAnywhere) {
  const std::string s = RandomFloats(301, 7, /*specials=*/false);
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7fc00001u}) {
    for (size_t i = 0; i < 301; ++i) {
      std::string t = s;
      std::memcpy(&t[i * 4], &special, 4);
      uint32_t got = 0;
      ScanFingerprint(t.data(), t.size(), &got);
      ASSERT_GE(got, fixed_point::kNonFiniteBits) << "element " << i;
      ASSERT_EQ(got, fixed_point::MaxAbsBits(t.data(), 301)) << i;
    }
  }
}

TEST(PayloadFingerprintTest, EveryFlippedBitAndChangedFloatIsSeen) {
  // A difference within 32 consecutive bits is always detected (the CRC
  // argument in the header), wherever it falls, including part boundaries.
  const std::string s = RandomBytes(1000, 3);
  const uint64_t base = PayloadFingerprint(s.data(), s.size());
  EXPECT_EQ(PayloadFingerprint(s.data(), s.size()), base);
  for (size_t bit = 0; bit < s.size() * 8; ++bit) {
    std::string t = s;
    t[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    ASSERT_NE(PayloadFingerprint(t.data(), t.size()), base) << "bit " << bit;
  }
  for (size_t i = 0; i + 4 <= s.size(); i += 4) {
    std::string t = s;
    const float f = 1.5f;
    std::memcpy(&t[i], &f, 4);
    if (t == s) continue;
    ASSERT_NE(PayloadFingerprint(t.data(), t.size()), base) << "float " << i;
  }
}

TEST(PayloadFingerprintTest, LengthAndPartOrderCount) {
  // Zero payloads of different lengths, and parts swapped.
  const std::string zeros(48, '\0');
  EXPECT_NE(PayloadFingerprint(zeros.data(), 40),
            PayloadFingerprint(zeros.data(), 48));
  const std::string a = RandomBytes(16, 4), b = RandomBytes(16, 5);
  const std::string ab = a + b + a, ba = b + a + a;  // 48 bytes: 3 x 16
  EXPECT_NE(PayloadFingerprint(ab.data(), ab.size()),
            PayloadFingerprint(ba.data(), ba.size()));
}

}  // namespace
}  // namespace pstrain
