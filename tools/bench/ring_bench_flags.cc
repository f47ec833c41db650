#include "tools/bench/ring_bench_flags.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "tools/bench/stats.h"

ABSL_FLAG(int, rounds, 3, "interleaved rounds (medians over rounds)");
ABSL_FLAG(int, iters, 5, "timed all-reduces per size (after one warm-up)");
ABSL_FLAG(std::string, ranks, "2,4", "rank counts, comma-separated");
ABSL_FLAG(std::string, mib, "1,4,16,64", "buffer sizes in MiB");
ABSL_FLAG(std::string, kib, "",
          "buffer sizes in KiB instead of --mib (latency of small buffers)");
ABSL_FLAG(int, segment_bytes, 1 << 20,
          "the ring's largest segment (allreduce.segment_bytes)");
ABSL_FLAG(int, compare_segment_bytes, 0,
          "also measure the ring with this segment size, side by side in the "
          "same rounds (0: not compared)");
ABSL_FLAG(std::string, compare_link_args, "",
          "also measure the ring with these gRPC channel arguments set on "
          "both ends of every link (key=integer,...; replacing the shipped "
          "RingLinkArgs' value of a key), side by side in the same rounds");
ABSL_FLAG(std::string, wire_dtype, "fp32",
          "the ring's wire: fp32 or bf16 (network.wire_dtype; MPI stays "
          "fp32, so bf16 ratios compare half the bytes)");
ABSL_FLAG(bool, heap_reuse, true,
          "keep freed segment buffers mapped (KeepFreedHeapForReuse, as the "
          "worker does in mode allreduce); false: glibc's defaults");
ABSL_FLAG(std::string, mpirun, "mpirun", "OpenMPI's mpirun");
ABSL_FLAG(std::string, mpi_program, "",
          "tools/bench/mpi_allreduce.cc built with mpicxx; empty: the ring "
          "alone, no ratios (said so)");

namespace pstrain::bench {

absl::StatusOr<RingRoundsOptions> RingRoundsOptionsFromFlags() {
  RingRoundsOptions o;
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.iters = absl::GetFlag(FLAGS_iters);
  const int segment_bytes = absl::GetFlag(FLAGS_segment_bytes);
  const int compare_segment_bytes = absl::GetFlag(FLAGS_compare_segment_bytes);
  if (o.rounds < 1 || o.iters < 1 || segment_bytes < 4 || segment_bytes % 4 ||
      compare_segment_bytes < 0 || compare_segment_bytes % 4) {
    return absl::InvalidArgumentError(
        "--rounds and --iters must be >= 1, --segment_bytes a positive "
        "multiple of 4 and --compare_segment_bytes 0 or one");
  }
  PS_ASSIGN_OR_RETURN(o.ranks,
                      ParsePositiveList("ranks", absl::GetFlag(FLAGS_ranks)));
  const bool kib = !absl::GetFlag(FLAGS_kib).empty();
  PS_ASSIGN_OR_RETURN(std::vector<int> sizes,
                      kib ? ParsePositiveList("kib", absl::GetFlag(FLAGS_kib))
                          : ParsePositiveList("mib", absl::GetFlag(FLAGS_mib)));
  for (int m : sizes) o.bytes.push_back(uint64_t(m) << (kib ? 10 : 20));
  const std::string wire = absl::GetFlag(FLAGS_wire_dtype);
  if (wire != "fp32" && wire != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype: expected fp32 or bf16, got '", wire, "'"));
  }
  o.ring.ring.segment_elems = segment_bytes / sizeof(float);
  if (wire == "bf16") o.ring.ring.wire_dtype = pstrain::v1::DTYPE_BF16;
  const std::string link_args = absl::GetFlag(FLAGS_compare_link_args);
  if (compare_segment_bytes > 0 || !link_args.empty()) {
    o.compare = o.ring;
    if (compare_segment_bytes > 0) {
      o.compare->ring.segment_elems = compare_segment_bytes / sizeof(float);
    }
    for (absl::string_view kv :
         absl::StrSplit(link_args, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(kv, absl::MaxSplits('=', 1));
      int value;
      if (p.first.empty() || !absl::SimpleAtoi(p.second, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--compare_link_args: expected key=integer, got '", kv, "'"));
      }
      auto& args = o.compare->link_args;
      auto it = std::find_if(args.begin(), args.end(),
                             [&](const auto& a) { return a.first == p.first; });
      if (it != args.end()) {
        it->second = value;
      } else {
        args.emplace_back(p.first, value);
      }
    }
  }
  o.mpirun = absl::GetFlag(FLAGS_mpirun);
  o.mpi_program = absl::GetFlag(FLAGS_mpi_program);
  return o;
}

bool HeapReuseFlag() { return absl::GetFlag(FLAGS_heap_reuse); }

}  // namespace pstrain::bench
