// Fuzzes the example-file parsers (worker/tabular_loaders): byte 0 picks
// digits CSV, scikit-learn CSV, CSV with a header, or libsvm; the rest is the
// file's text. Property: a parsed table is consistent (x is rows x cols,
// one label per row, the missing count matches the NaN cells).
#include <cmath>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_input.h"
#include "worker/data/tabular_loaders.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  absl::StatusOr<Table> table;
  switch (data[0] % 4) {
    case 0:
      table = ParseDigitsCsv(text, "fuzz.csv");
      break;
    case 1:
      table = ParseSklearnCsv(text, "fuzz.csv");
      break;
    case 2:
      table = ParseCsv(text, "fuzz.csv", "label");
      break;
    default:
      table = ParseLibsvm(text, "fuzz.libsvm");
      break;
  }
  if (!table.ok()) return 0;
  PS_FUZZ_CHECK(table->rows >= 0 && table->cols >= 0, "non-negative sizes");
  PS_FUZZ_CHECK(
      static_cast<int64_t>(table->x.size()) == table->rows * table->cols,
      "x is rows x cols");
  PS_FUZZ_CHECK(static_cast<int64_t>(table->y.size()) == table->rows,
                "one label per row");
  int64_t nan = 0;
  for (float v : table->x) nan += std::isnan(v) ? 1 : 0;
  PS_FUZZ_CHECK(nan == table->missing, "missing counts the NaN cells");
  return 0;
}
