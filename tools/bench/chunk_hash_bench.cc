#include "tools/bench/chunk_hash_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "common/held_term.h"
#include "server/chunk_fingerprint.h"
#include "server/fixed_point_kernels.h"
#include "tools/bench/stats.h"

namespace pstrain::bench {
namespace {

// The one-worker held term's element, both forms (common/held_term.h), over
// `len` floats into `g` on AVX2 (where the float form is used): n = 1 on a
// grid of 2^-20, where HeldTermInFloats allows it.
constexpr double kHeldToFixed = 1048576.0;  // 2^20
constexpr double kHeldScale = 1.0 / kHeldToFixed;

__attribute__((target("avx2"))) void HeldInDoubles(const char* src, size_t len,
                                                   float* g) {
  for (size_t i = 0; i < len; ++i) {
    float x;
    std::memcpy(&x, src + i * sizeof(float), sizeof(float));
    g[i] = HeldTermElement(x, 1.0, kHeldToFixed, kHeldScale);
  }
}

__attribute__((target("avx2"))) void HeldInFloats(const char* src, size_t len,
                                                  float k, float scale,
                                                  float* g) {
  for (size_t i = 0; i < len; ++i) {
    float x;
    std::memcpy(&x, src + i * sizeof(float), sizeof(float));
    g[i] = HeldTermElementInFloats(x, k, scale);
  }
}

struct Variant {
  const char* name;
  std::function<uint64_t(const char*, size_t, size_t)> run;  // data, len, k
};

}  // namespace

int RunChunkHashBench(const ChunkHashBenchOptions& o) {
  std::vector<char> buffer(o.buffer);
  std::mt19937 rng(1);
  for (size_t i = 0; i < buffer.size(); i += 4) {
    const uint32_t x = rng();
    std::memcpy(&buffer[i], &x, std::min<size_t>(4, buffer.size() - i));
  }
  std::vector<char> copy(o.chunk);
  std::vector<Variant> variants = {
      {"absl_hash+MaxAbsBits (before)",
       [](const char* d, size_t n, size_t k) {
         return absl::HashOf(k, absl::string_view(d, n)) +
                pstrain::fixed_point::MaxAbsBits(d, n / 4);
       }},
      {"ScanFingerprint (after)",
       [](const char* d, size_t n, size_t k) {
         uint32_t max_bits = 0;
         return absl::HashOf(k, pstrain::ScanFingerprint(d, n, &max_bits)) +
                max_bits;
       }},
      {"scan, SSE4.2 crc32",
       [](const char* d, size_t n, size_t) {
         uint32_t max_bits = 0;
         const pstrain::crc32c::Parts p =
             pstrain::crc32c::HasSse42()
                 ? pstrain::crc32c::Sse42ScanParts(d, n, &max_bits)
                 : pstrain::crc32c::PortableScanParts(d, n, &max_bits);
         return pstrain::crc32c::FromParts(n, p) + max_bits;
       }},
      {"absl_hash alone",
       [](const char* d, size_t n, size_t k) {
         return absl::HashOf(k, absl::string_view(d, n));
       }},
      {"crc32c alone",
       [](const char* d, size_t n, size_t k) {
         return absl::HashOf(k, pstrain::PayloadFingerprint(d, n));
       }},
      {"MaxAbsBits alone",
       [](const char* d, size_t n, size_t) {
         return uint64_t{pstrain::fixed_point::MaxAbsBits(d, n / 4)};
       }},
      {"memcpy (the parse copy)",
       [&copy](const char* d, size_t n, size_t) {
         std::memcpy(copy.data(), d, n);
         return static_cast<uint64_t>(copy[n / 2]);
       }},
  };
  if (o.table) {
    variants.push_back({"crc32c_table", [](const char* d, size_t n, size_t) {
                          return uint64_t{
                              pstrain::crc32c::PortableParts(d, n).crc[0]};
                        }});
  }
  // The one-worker held term's conversion (HeldToFloat: the term on the
  // accumulator's grid, back to floats), per build: the arithmetic of the
  // one-pass apply without the weights' update.
  std::vector<float> held(o.chunk / sizeof(float));
  auto held_variant = [&held](const char* name,
                              const pstrain::fixed_point::Kernels& k) {
    return Variant{name, [&held, &k](const char* d, size_t n, size_t) {
                     k.held_to_float(d, n / sizeof(float), 1.0, 1.0, 1.0, 1.0,
                                     held.data());
                     return static_cast<uint64_t>(held[n / 8] != 0);
                   }};
  };
  if (pstrain::fixed_point::HasAvx2()) {
    variants.push_back(
        held_variant("held term, AVX2", pstrain::fixed_point::Avx2Kernels()));
  }
  if (pstrain::fixed_point::HasAvx512()) {
    variants.push_back(held_variant("held term, AVX-512",
                                    pstrain::fixed_point::Avx512Kernels()));
  }
  float held_k = 0, held_scale = 0;
  if (pstrain::fixed_point::HasAvx2() &&
      HeldTermInFloats(1.0, kHeldToFixed, kHeldScale, &held_k, &held_scale)) {
    variants.push_back({"held element in doubles, AVX2",
                        [&held](const char* d, size_t n, size_t) {
                          HeldInDoubles(d, n / sizeof(float), held.data());
                          return static_cast<uint64_t>(held[n / 8] != 0);
                        }});
    variants.push_back(
        {"held element in floats, AVX2",
         [&held, held_k, held_scale](const char* d, size_t n, size_t) {
           HeldInFloats(d, n / sizeof(float), held_k, held_scale, held.data());
           return static_cast<uint64_t>(held[n / 8] != 0);
         }});
  }
  if (pstrain::crc32c::HasAvx512Crc()) {
    variants.push_back(
        {"scan, AVX-512 VPCLMULQDQ", [](const char* d, size_t n, size_t) {
           uint32_t max_bits = 0;
           const pstrain::crc32c::Parts p =
               pstrain::crc32c::Avx512ScanParts(d, n, &max_bits);
           return pstrain::crc32c::FromParts(n, p) + max_bits;
         }});
  }
  // The in-place parse's gather and scan (GatherScanFingerprint) from
  // 64 KiB pieces, as gRPC's slices hold a received message, into `copy`.
  auto gather_variant = [&copy](const char* name, auto parts_fn) {
    return Variant{name, [&copy, parts_fn](const char* d, size_t n, size_t) {
                     std::vector<absl::string_view> pieces;
                     for (size_t at = 0; at < n; at += 65536) {
                       pieces.emplace_back(d + at,
                                           std::min<size_t>(65536, n - at));
                     }
                     uint32_t max_bits = 0;
                     const pstrain::crc32c::Parts p =
                         parts_fn(pieces, n, copy.data(), &max_bits);
                     return pstrain::crc32c::FromParts(n, p) + max_bits;
                   }};
  };
  if (pstrain::crc32c::HasSse42()) {
    variants.push_back(gather_variant("gather+scan from pieces, SSE4.2",
                                      pstrain::crc32c::Sse42GatherScanParts));
  }
  if (pstrain::crc32c::HasAvx512Crc()) {
    variants.push_back(gather_variant("gather+scan from pieces, AVX-512",
                                      pstrain::crc32c::Avx512GatherScanParts));
  }
  std::printf("crc32c: SSE4.2 %s, AVX-512 VPCLMULQDQ %s\n",
              pstrain::crc32c::HasSse42() ? "yes" : "no (table build)",
              pstrain::crc32c::HasAvx512Crc() ? "yes" : "no");
  const size_t chunks = o.buffer / o.chunk;
  std::map<std::string, std::vector<double>> rate, ratio;
  uint64_t sink = 0;
  for (int r = 0; r < o.rounds; ++r) {
    std::vector<size_t> order(variants.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    std::vector<double> gbs(variants.size());
    for (size_t v : order) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t k = 0; k < chunks; ++k) {
        sink += variants[v].run(buffer.data() + k * o.chunk, o.chunk, k);
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      gbs[v] = static_cast<double>(chunks * o.chunk) / s / 1e9;
    }
    std::printf("round %d:", r);
    for (size_t v = 0; v < variants.size(); ++v) {
      std::printf(" %s %.2f GB/s;", variants[v].name, gbs[v]);
      rate[variants[v].name].push_back(gbs[v]);
      ratio[variants[v].name].push_back(gbs[v] / gbs[0]);
    }
    std::printf("\n");
  }
  for (const Variant& v : variants) {
    const auto& q = ratio[v.name];
    std::printf(
        "%-24s median %.2f GB/s; / before within a round: median %.2f "
        "(%.2f-%.2f)\n",
        v.name, Median(rate[v.name]), Median(q),
        *std::min_element(q.begin(), q.end()),
        *std::max_element(q.begin(), q.end()));
  }
  // The wider builds against the narrower ones, within each round.
  const std::pair<const char*, const char*> pairs[] = {
      {"scan, AVX-512 VPCLMULQDQ", "scan, SSE4.2 crc32"},
      {"gather+scan from pieces, AVX-512", "gather+scan from pieces, SSE4.2"},
      {"held element in floats, AVX2", "held element in doubles, AVX2"},
      {"held term, AVX-512", "held term, AVX2"}};
  for (const auto& [wide, narrow] : pairs) {
    const std::vector<double>& a = rate[wide];
    const std::vector<double>& b = rate[narrow];
    if (a.empty() || b.empty()) continue;  // a build this CPU cannot run
    std::vector<double> q;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      q.push_back(a[i] / b[i]);
    }
    std::printf("%s / %s within a round: median %.2f (%.2f-%.2f)\n", wide,
                narrow, Median(q), *std::min_element(q.begin(), q.end()),
                *std::max_element(q.begin(), q.end()));
  }
  return sink == 42 ? 1 : 0;  // keeps the results alive
}

}  // namespace pstrain::bench
