// File-backed examples: a Table (worker/data/tabular_loaders.h) turned into a
// DataSource with a fixed seeded split, train-mean imputation, optional
// standardization and the epoch sampler (contract in worker/data/data.h).
#ifndef PSTRAIN_WORKER_DATA_FILE_DATA_H_
#define PSTRAIN_WORKER_DATA_FILE_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "worker/data/data.h"
#include "worker/data/tabular_loaders.h"

namespace pstrain {

// A seeded permutation of `count` items: element i of [0, count) in the order
// a Fisher-Yates shuffle driven by splitmix64(seed) puts it. The same on
// every platform (no std:: distributions).
std::vector<int64_t> SeededPermutation(int64_t count, uint64_t seed);

// Maps global example ids to training rows: epoch = id / size, position =
// id % size, row = Permutation(epoch)[position], each epoch's permutation
// seeded by (seed, epoch). Keeps the latest epoch's permutation, so walking
// ids in order builds each permutation once. Thread-compatible.
class EpochSampler {
 public:
  EpochSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}

  int64_t size() const { return size_; }
  // Training row of a global id; size() must be >= 1.
  int64_t Row(uint64_t id);
  // The order of epoch `epoch`; valid until the next call for another epoch.
  const std::vector<int64_t>& Permutation(uint64_t epoch);
  // How many permutations were built so far (for tests of the cache).
  int64_t permutations_built() const { return built_; }

 private:
  const int64_t size_;
  const uint64_t seed_;
  bool cached_ = false;
  uint64_t epoch_ = 0;
  std::vector<int64_t> order_;
  int64_t built_ = 0;
};

// Reads the file of `config` (LoadTable) and builds the source.
absl::StatusOr<std::unique_ptr<DataSource>> CreateFileSource(
    const DataConfig& config);

// Builds the source from rows already parsed; `origin` (e.g. the file path)
// goes into Describe(). Errors: no training rows left after the split, one
// label only, or too many classes (INVALID_ARGUMENT naming the data key).
absl::StatusOr<std::unique_ptr<DataSource>> CreateTableSource(
    Table table, const DataConfig& config, const std::string& origin);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_FILE_DATA_H_
