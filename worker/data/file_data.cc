#include "worker/data/file_data.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pstrain {
namespace {

static_assert(kMissingField == kMissingCategory,
              "a missing file field is the model's missing category");

constexpr int64_t kMaxClasses = 1000;
constexpr uint64_t kMaxBatchElements = uint64_t{1} << 28;
// Stream tags, so the split and the shuffles draw unrelated numbers.
constexpr uint64_t kSplitTag = 0x73706c6974;      // "split"
constexpr uint64_t kShuffleTag = 0x73687566666c;  // "shuffl"

// splitmix64: one step of the generator over `state`.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Hash(uint64_t a, uint64_t b) {
  uint64_t state = a ^ (b * 0xd1b54a32d192ed03ULL);
  return NextRandom(&state);
}

absl::Status KeyError(const std::string& key, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", message));
}

std::string FormatLabel(double label) {
  return absl::StrCat(label);  // shortest form: 0, 1, 2.5
}

// "labels 0, 1 -> classes 0..1" in a line, eliding the middle of long lists.
std::string DescribeLabels(const std::vector<std::string>& names) {
  const size_t k = names.size();
  std::string list;
  if (k <= 10) {
    list = absl::StrJoin(names, ", ");
  } else {
    list = absl::StrCat(names[0], ", ", names[1], ", ", names[2], ", ..., ",
                        names[k - 1]);
  }
  return absl::StrCat(k, " classes (labels ", list, " -> 0..", k - 1, ")");
}

class FileSource : public DataSource {
 public:
  // train_cat / test_cat: cat_cols categorical values per row (0: none).
  FileSource(int64_t dim, int64_t classes, std::vector<float> train_x,
             std::vector<float> train_y, std::vector<float> test_x,
             std::vector<float> test_y, int64_t cat_cols,
             std::vector<uint64_t> train_cat, std::vector<uint64_t> test_cat,
             uint64_t seed, std::string description)
      : dim_(dim),
        classes_(classes),
        cat_cols_(cat_cols),
        train_x_(std::move(train_x)),
        train_y_(std::move(train_y)),
        test_x_(std::move(test_x)),
        test_y_(std::move(test_y)),
        train_cat_(std::move(train_cat)),
        test_cat_(std::move(test_cat)),
        sampler_(train_y_.size(), Hash(seed, kShuffleTag)),
        description_(std::move(description)) {}

  int64_t num_features() const override { return dim_; }
  int64_t num_classes() const override { return classes_; }
  int64_t train_size() const override { return train_y_.size(); }
  std::string Describe() const override { return description_; }

  absl::StatusOr<Batch> TrainBatch(uint64_t first_id, int64_t n) override {
    if (n < 0 || static_cast<uint64_t>(n) * dim_ > kMaxBatchElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", n, " examples of ", dim_,
                       " features is negative or too large"));
    }
    Batch batch = Empty(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = sampler_.Row(first_id + i);
      std::copy_n(&train_x_[row * dim_], dim_, &batch.x[i * dim_]);
      batch.y[i] = train_y_[row];
      std::copy_n(train_cat_.begin() + row * cat_cols_, cat_cols_,
                  batch.cat.begin() + i * cat_cols_);
    }
    return batch;
  }

  absl::StatusOr<Batch> TestSlice(int rank, int world) override {
    auto range = TestSliceRange(test_y_.size(), rank, world);
    if (!range.ok()) return range.status();
    const auto [begin, end] = *range;
    Batch batch = Empty(end - begin);
    std::copy(test_x_.begin() + begin * dim_, test_x_.begin() + end * dim_,
              batch.x.begin());
    std::copy(test_y_.begin() + begin, test_y_.begin() + end, batch.y.begin());
    std::copy(test_cat_.begin() + begin * cat_cols_,
              test_cat_.begin() + end * cat_cols_, batch.cat.begin());
    return batch;
  }

 private:
  Batch Empty(int64_t n) const {
    Batch batch;
    batch.n = n;
    batch.dim = dim_;
    batch.x.resize(n * dim_);
    batch.y.resize(n);
    batch.num_cat = cat_cols_;
    batch.cat.resize(n * cat_cols_);
    return batch;
  }

  const int64_t dim_, classes_, cat_cols_;
  const std::vector<float> train_x_, train_y_, test_x_, test_y_;
  const std::vector<uint64_t> train_cat_, test_cat_;
  EpochSampler sampler_;
  const std::string description_;
};

}  // namespace

std::vector<int64_t> SeededPermutation(int64_t count, uint64_t seed) {
  std::vector<int64_t> order(count);
  for (int64_t i = 0; i < count; ++i) order[i] = i;
  uint64_t state = seed;
  for (int64_t i = count - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits onto [0, i] (bias < 2^-32 here).
    const uint64_t j = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(NextRandom(&state)) * (i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

const std::vector<int64_t>& EpochSampler::Permutation(uint64_t epoch) {
  if (!cached_ || epoch != epoch_) {
    order_ = SeededPermutation(size_, Hash(seed_, epoch));
    epoch_ = epoch;
    cached_ = true;
    ++built_;
  }
  return order_;
}

int64_t EpochSampler::Row(uint64_t id) {
  const uint64_t size = size_;
  return Permutation(id / size)[id % size];
}

absl::StatusOr<std::unique_ptr<DataSource>> CreateFileSource(
    const DataConfig& config) {
  absl::StatusOr<Table> table = LoadTable(config);
  if (!table.ok()) return table.status();
  return CreateTableSource(*std::move(table), config, DataFilePath(config));
}

absl::StatusOr<std::unique_ptr<DataSource>> CreateTableSource(
    Table table, const DataConfig& config, const std::string& origin) {
  const int64_t rows = table.rows, dim = table.cols;
  if (rows < 1 || dim < 1) {
    return KeyError("data.source",
                    absl::StrCat(origin, " has ", rows, " rows and ", dim,
                                 " feature columns"));
  }
  if (!(config.test_fraction() >= 0 && config.test_fraction() < 1)) {
    return KeyError(
        "data.test_fraction",
        absl::StrCat("must be in [0, 1), got ", config.test_fraction()));
  }
  if (config.num_classes() < 1) {
    return KeyError("data.num_classes",
                    absl::StrCat("must be >= 1, got ", config.num_classes()));
  }

  // Labels: class ids 0..K-1 in sorted label order, or regression targets.
  std::vector<float> labels(rows);
  int64_t classes = 1;
  std::string label_text;
  if (config.num_classes() == 1) {
    if (table.text_labels) {
      return KeyError(
          "data.num_classes",
          absl::StrCat("is 1 (regression) but the labels of ", origin,
                       " are not numbers (e.g. '", table.label_names[0], "')"));
    }
    for (int64_t r = 0; r < rows; ++r) labels[r] = table.y[r];
    label_text = "regression on the raw label";
  } else {
    std::vector<double> distinct = table.y;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()),
                   distinct.end());
    classes = distinct.size();
    if (classes < 2 || classes > kMaxClasses) {
      return KeyError(
          "data.num_classes",
          absl::StrCat(origin, " has ", classes,
                       " distinct labels; classification needs 2..",
                       kMaxClasses, " (set data.num_classes: 1 to regress)"));
    }
    for (int64_t r = 0; r < rows; ++r) {
      labels[r] =
          std::lower_bound(distinct.begin(), distinct.end(), table.y[r]) -
          distinct.begin();
    }
    std::vector<std::string> names;
    for (double label : distinct) {
      const bool named = table.label_names.size() == distinct.size() &&
                         label == std::floor(label) && label >= 0 &&
                         label < static_cast<double>(distinct.size());
      names.push_back(named ? table.label_names[static_cast<size_t>(label)]
                            : FormatLabel(label));
    }
    label_text = DescribeLabels(names);
  }

  // The split: the first round(rows * test_fraction) rows of a seeded
  // permutation are the test set; both sets keep file order.
  const std::vector<int64_t> order =
      SeededPermutation(rows, Hash(config.seed(), kSplitTag));
  const int64_t test_rows = std::llround(rows * config.test_fraction());
  if (rows - test_rows < 1) {
    return KeyError("data.test_fraction", absl::StrCat(config.test_fraction(),
                                                       " leaves no training "
                                                       "rows of ",
                                                       rows));
  }
  std::vector<int64_t> test(order.begin(), order.begin() + test_rows);
  std::vector<int64_t> train(order.begin() + test_rows, order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());

  // Training-set statistics per column: mean of the present values (for
  // imputation), then mean and standard deviation after imputation.
  std::vector<double> fill(dim, 0.0), mean(dim, 0.0), scale(dim, 1.0);
  const float* x = table.x.data();
  for (int64_t k = 0; k < dim; ++k) {
    double sum = 0;
    int64_t present = 0;
    for (int64_t r : train) {
      const float v = x[r * dim + k];
      if (!std::isnan(v)) {
        sum += v;
        ++present;
      }
    }
    fill[k] = present > 0 ? sum / present : 0.0;
  }
  int64_t missing_train = 0, missing_test = 0;
  auto value = [&](int64_t r, int64_t k) -> double {
    const float v = x[r * dim + k];
    return std::isnan(v) ? fill[k] : v;
  };
  if (config.standardize()) {
    for (int64_t k = 0; k < dim; ++k) {
      double sum = 0, lo = value(train[0], k), hi = lo;
      for (int64_t r : train) {
        const double v = value(r, k);
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      mean[k] = sum / train.size();
      double sq = 0;
      for (int64_t r : train)
        sq += (value(r, k) - mean[k]) * (value(r, k) - mean[k]);
      const double sd = std::sqrt(sq / train.size());
      // A constant column is only centred (std 0 -> 1).
      scale[k] = lo == hi || !(sd > 0) ? 1.0 : sd;
    }
  }
  const int64_t cat_cols = table.cat_cols;
  auto take = [&](const std::vector<int64_t>& ids, std::vector<float>* out_x,
                  std::vector<float>* out_y, std::vector<uint64_t>* out_cat,
                  int64_t* missing) {
    out_x->reserve(ids.size() * dim);
    for (int64_t r : ids) {
      out_cat->insert(out_cat->end(), table.cat.begin() + r * cat_cols,
                      table.cat.begin() + (r + 1) * cat_cols);
      for (int64_t k = 0; k < dim; ++k) {
        if (std::isnan(x[r * dim + k])) ++*missing;
        out_x->push_back(
            static_cast<float>((value(r, k) - mean[k]) / scale[k]));
      }
      out_y->push_back(labels[r]);
    }
  };
  std::vector<float> train_x, train_y, test_x, test_y;
  std::vector<uint64_t> train_cat, test_cat;
  take(train, &train_x, &train_y, &train_cat, &missing_train);
  take(test, &test_x, &test_y, &test_cat, &missing_test);

  const std::string missing_text =
      table.missing == 0
          ? "no missing values"
          : absl::StrCat(table.missing, " missing values (", missing_train,
                         " train, ", missing_test,
                         " test) imputed with train column means");
  std::string description = absl::StrCat(
      ConfigName(config.source()), " from ", origin, ": ", rows, " rows x ",
      dim, " features",
      cat_cols > 0 ? absl::StrCat(" + ", cat_cols, " categorical columns")
                   : std::string(),
      ", ", label_text, "; split seed ", config.seed(), ", test_fraction ",
      config.test_fraction(), ": ", train.size(), " train / ", test.size(),
      " test rows; ", missing_text, "; ",
      config.standardize() ? "features standardized with train mean/std"
                           : "features not standardized",
      "; training order reshuffled every epoch (seed ", config.seed(),
      ", epoch)");
  return std::unique_ptr<DataSource>(new FileSource(
      dim, classes, std::move(train_x), std::move(train_y), std::move(test_x),
      std::move(test_y), cat_cols, std::move(train_cat), std::move(test_cat),
      config.seed(), std::move(description)));
}

}  // namespace pstrain
