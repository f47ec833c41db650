// Where the workers' examples come from. Examples are addressed by a global
// id, so the global batch of step t is the same whatever the number of
// workers: worker `rank` of `world` with local batch b at step t gets ids
// [t*world*b + rank*b, t*world*b + (rank+1)*b) (FirstExampleId).
#ifndef PSTRAIN_WORKER_DATA_DATA_H_
#define PSTRAIN_WORKER_DATA_DATA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/job_config.h"
#include "worker/model/model.h"

namespace pstrain {

// A deterministic example source: every example is a pure function of
// (config, stream, id), so any worker can produce any id and all workers
// agree. Thread-compatible.
//
// "synthetic": a random teacher fixed by config.seed (a linear map plus a
// small tanh network) labels features drawn per id. Classification
// (num_classes >= 2): label = argmax of the teacher's logits, replaced by a
// uniformly random label with probability `noise`. Regression
// (num_classes == 1): target = teacher output + noise * N(0, 1).
// num_features is the encoded width D the model sees; inside it
//   C = num_categorical columns of L = categories levels, one-hot encoded
//       (L slots each, all 0 when missing);
//   with missing_rate m > 0, one missing-indicator slot per column that can
//       be missing (value encoded as 0, indicator 1, with probability m);
//   the remaining W = D - C*L - (m > 0 ? C : 0) slots are numeric N(0, 1)
//       columns: all W when m = 0, else ceil(W/2) numeric columns of which
//       floor(W/2) can be missing (when W is odd the last one never is).
// Slot order: numeric values, one-hot blocks, numeric indicators,
// categorical indicators. W < 0 is INVALID_ARGUMENT. The teacher reads the
// encoded features, so the task stays learnable. With C = 0 and m = 0 every
// slot is numeric (the plain generator). Test ids come from separate streams.
// Sparse columns (data.sparse_columns S > 0, model.type wide_deep): each
// example also has S categorical values (Batch.cat), column c's value of
// rank r in [0, sparse_cardinality) drawn from a Zipf law with exponent
// zipf_exponent (rank 0 the most frequent: a few hot values, a long tail)
// and given as a scrambled 64-bit id; the teacher adds to the logits an
// effect vector per (column, rank), N(0, 1) per class, fixed by the seed, so
// the labels depend on the values and only embeddings of them can learn it.
// If config.targets is non-empty (the "scalar" model), examples have no
// features (dim 0) and example id has target targets[id % targets.size()].
//
// File data ("digits", "breast_cancer", "csv", "libsvm"; see
// worker/data/tabular_loaders.h for the formats and errors): the rows are read
// once, then
//   labels: with data.num_classes >= 2 the distinct labels are mapped to
//     0..K-1 in sorted order and num_classes() = K (whatever the config
//     says); with data.num_classes == 1 the raw label is a regression target;
//   split: a permutation seeded by data.seed puts round(rows *
//     test_fraction) rows in the test set, the rest in the training set, the
//     same on every worker (data.test_examples is ignored);
//   missing values (csv): imputed with the training set's column mean;
//   standardize: every feature z-scored with the training set's mean and
//     standard deviation (a constant column is only centred);
//   sampler: global id -> epoch = id / train_size(), position = id %
//     train_size() -> the training row perm_epoch[position], where perm_epoch
//     is a permutation seeded by (data.seed, epoch). As workers take disjoint
//     id ranges, each example is seen by exactly one worker once per epoch,
//     in a new order every epoch.
class DataSource {
 public:
  // Invalid configs are INVALID_ARGUMENT naming the field (e.g. data.source);
  // file data also fails as LoadTable does (NOT_FOUND for a missing file,
  // INVALID_ARGUMENT naming file and line for a malformed row).
  static absl::StatusOr<std::unique_ptr<DataSource>> Create(
      const DataConfig& config);
  virtual ~DataSource() = default;

  // Input width of the model (the encoded width for synthetic tables).
  virtual int64_t num_features() const = 0;
  virtual int64_t num_classes() const = 0;  // 1 = regression
  // Training examples per epoch; 0 when unlimited (synthetic).
  virtual int64_t train_size() const = 0;

  // One paragraph for the log: source, file, sizes, classes, seeds, split,
  // encoding, scaling.
  virtual std::string Describe() const = 0;

  // Training examples first_id .. first_id + n - 1 (n >= 0).
  virtual absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) = 0;

  // Held-out set (test ids [0, size)): worker `rank` of `world` gets the
  // contiguous slice TestSliceRange(size, rank, world).
  virtual absl::StatusOr<Batch> TestSlice(int rank, int world) = 0;
};

// Zipf-distributed ranks in [0, n): P(r) proportional to 1 / (r + 1)^s, for
// any s > 0 and n up to 2^62, by rejection-inversion (Hoermann and
// Derflinger 1996, "Rejection-inversion to generate variates from monotone
// discrete distributions"; the formulation of Apache Commons RNG's
// RejectionInversionZipfSampler) in O(1) time and memory, so a column of
// 10^8 values needs no table. Thread-compatible; immutable.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double exponent);
  // One rank; `uniform(attempt)` gives the attempt-th uniform in (0, 1]
  // (a counter-based stream, so every example's draw is reproducible).
  int64_t Sample(const std::function<double(int)>& uniform) const;

 private:
  double H(double x) const;
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;
  static double Helper1(double x);
  static double Helper2(double x);

  const int64_t n_;
  const double s_;
  double h_integral_x1_, h_integral_n_, sv_;
};

// First global example id of worker `rank` at `step`: step*world*b + rank*b.
uint64_t FirstExampleId(uint64_t step, int rank, int world,
                        int64_t local_batch);

// [size * rank / world, size * (rank + 1) / world): the test ids `rank` of
// `world` evaluates. INVALID_ARGUMENT unless 0 <= rank < world.
absl::StatusOr<std::pair<int64_t, int64_t>> TestSliceRange(int64_t size,
                                                           int rank, int world);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_DATA_H_
