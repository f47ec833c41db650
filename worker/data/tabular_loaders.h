// Readers of example files into a Table: the built-in data sets (digits,
// breast_cancer, as shipped in Debian's python3-sklearn and extracted by
// `psctl setup`), CSV with a header row, and libsvm. They only parse: the
// split, imputation, scaling and label mapping happen in
// worker/data/file_data.h.
//
// Every error names the file and, for a bad row, the 1-based line:
//   "digits.csv:17: expected 65 values, got 64"      (INVALID_ARGUMENT)
//   "x.csv:5: column 'age': 'abc' is not a number"   (INVALID_ARGUMENT)
//   "a.libsvm:3: index 0 is not >= 1"                (INVALID_ARGUMENT)
//   "cannot open data file '/no/such.csv'"           (NOT_FOUND)
#ifndef PSTRAIN_WORKER_DATA_TABULAR_LOADERS_H_
#define PSTRAIN_WORKER_DATA_TABULAR_LOADERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_config.h"

namespace pstrain {

// Examples as read from a file, in file order.
struct Table {
  int64_t rows = 0;
  int64_t cols = 0;       // features per row
  std::vector<float> x;   // rows * cols, row-major; NaN marks a missing value
  std::vector<double> y;  // rows labels (see label_names)
  int64_t missing = 0;    // NaN cells in x
  // csv: the header's names of the feature columns (label column removed).
  std::vector<std::string> feature_names;
  // Names of the labels 0, 1, ... when the file gives them: the header of
  // an sklearn CSV, or for a csv label column that is not all numbers
  // (text_labels) the distinct texts in sorted order, y holding the index.
  std::vector<std::string> label_names;
  bool text_labels = false;
  // Categorical columns per row (criteo: 26; 0 otherwise) and their raw
  // values, rows * cat_cols, row-major; kMissingField when empty.
  int64_t cat_cols = 0;
  std::vector<uint64_t> cat;
};

// A categorical field that is empty (the same value as the model's
// kMissingCategory, worker/model/model.h).
inline constexpr uint64_t kMissingField = ~uint64_t{0};

// Parsers of text already read; `name` (a file name) prefixes every error.
// Blank lines are skipped; "\r\n" line ends are accepted.

// digits: no header, 65 comma-separated numbers per row (64 pixels, label).
absl::StatusOr<Table> ParseDigitsCsv(absl::string_view text,
                                     const std::string& name);

// scikit-learn's bundled CSV (breast_cancer): a first line
// "rows,features,class names..." then rows of `features` numbers and the
// label. The row count must match the header.
absl::StatusOr<Table> ParseSklearnCsv(absl::string_view text,
                                      const std::string& name);

// A header row of column names, then numeric rows of the same width. The
// label is the column named `label_column`; every other column is a feature.
// Feature cells that are empty, "NA" or "nan" (any case) are missing (NaN).
// Labels must be present; a label column that is not all numbers is read as
// class names (label_names). Fields are split at every comma and trimmed of
// spaces and surrounding double quotes (quoted commas are not supported).
absl::StatusOr<Table> ParseCsv(absl::string_view text, const std::string& name,
                               const std::string& label_column);

// libsvm / svmlight: "label idx:value idx:value ..." with 1-based indices,
// separated by spaces or tabs; text after '#' is a comment. Absent indices
// are 0 (sparse, not missing); cols = the largest index seen.
absl::StatusOr<Table> ParseLibsvm(absl::string_view text,
                                  const std::string& name);

// The Criteo display-ads layout (Criteo's Kaggle challenge and 1 TB click
// logs): one example per line, 40 tab-separated fields: the label (0 or 1),
// 13 integer columns I1..I13 (counts; may be negative), 26 categorical
// columns C1..C26 given as hexadecimal hashes (up to 16 hex digits, usually
// 8). Any field but the label may be empty: a missing integer is NaN (the
// source imputes it), a missing categorical value kMissingField. Integers
// are read as log(1 + x) for x >= 0 and x below 0 (a log scale for heavy
// counts); categorical values as the number the hex spells. Errors name the
// line and the field, e.g. "day_0.tsv:3: field 15 (C1): 'xyz' is not
// hexadecimal".
absl::StatusOr<Table> ParseCriteoTsv(absl::string_view text,
                                     const std::string& name);

// The file a file-backed source reads: config.path when set, else
// config.dir + "/digits.csv" or "/breast_cancer.csv". Empty for csv/libsvm
// without a path and for the other sources.
std::string DataFilePath(const DataConfig& config);

// Reads DataFilePath(config) and parses it by config.source (digits,
// breast_cancer, csv, libsvm or criteo). A missing file is NOT_FOUND naming the
// path (for the built-in sets, with a hint to run `./psctl setup`).
absl::StatusOr<Table> LoadTable(const DataConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_DATA_TABULAR_LOADERS_H_
