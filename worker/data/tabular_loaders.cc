#include "worker/data/tabular_loaders.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

constexpr int64_t kDigitsValues = 65;              // 8 x 8 pixels + label
constexpr int64_t kMaxLibsvmIndex = 1 << 24;       // features, once densified
constexpr uint64_t kMaxCells = uint64_t{1} << 28;  // rows * cols

absl::Status RowError(const std::string& name, int64_t line,
                      const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, ":", line, ": ", message));
}

absl::Status FileError(const std::string& name, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", message));
}

// The non-blank lines of `text` with their 1-based line numbers, trailing
// '\r' removed.
std::vector<std::pair<int64_t, absl::string_view>> Lines(
    absl::string_view text) {
  std::vector<std::pair<int64_t, absl::string_view>> lines;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    lines.emplace_back(number, line);
  }
  return lines;
}

// Comma-separated fields, trimmed of spaces and one pair of double quotes.
std::vector<absl::string_view> Fields(absl::string_view line) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
  for (absl::string_view& f : fields) {
    f = absl::StripAsciiWhitespace(f);
    if (f.size() >= 2 && f.front() == '"' && f.back() == '"') {
      f = absl::StripAsciiWhitespace(f.substr(1, f.size() - 2));
    }
  }
  return fields;
}

bool ParseNumber(absl::string_view text, double* value) {
  return absl::SimpleAtod(text, value) && std::isfinite(*value);
}

bool IsMissing(absl::string_view cell) {
  return cell.empty() || absl::EqualsIgnoreCase(cell, "na") ||
         absl::EqualsIgnoreCase(cell, "nan");
}

absl::Status CheckCells(const std::string& name, int64_t rows, int64_t cols) {
  if (static_cast<uint64_t>(rows) * std::max<int64_t>(cols, 1) > kMaxCells) {
    return FileError(
        name, absl::StrCat(rows, " rows x ", cols, " features is too large"));
  }
  return absl::OkStatus();
}

// Rows of exactly `width` numbers, the last one the label, from lines[first].
absl::StatusOr<Table> ParseNumericRows(
    const std::vector<std::pair<int64_t, absl::string_view>>& lines,
    size_t first, int64_t width, const std::string& name) {
  Table table;
  table.cols = width - 1;
  for (size_t i = first; i < lines.size(); ++i) {
    const auto& [line, text] = lines[i];
    const std::vector<absl::string_view> fields = Fields(text);
    if (static_cast<int64_t>(fields.size()) != width) {
      return RowError(
          name, line,
          absl::StrCat("expected ", width, " values, got ", fields.size()));
    }
    for (int64_t k = 0; k < width; ++k) {
      double value;
      if (!ParseNumber(fields[k], &value)) {
        return RowError(name, line,
                        absl::StrCat("value ", k + 1, ": '", fields[k],
                                     "' is not a number"));
      }
      if (k + 1 < width) {
        table.x.push_back(static_cast<float>(value));
      } else {
        table.y.push_back(value);
      }
    }
    ++table.rows;
    if (absl::Status s = CheckCells(name, table.rows, table.cols); !s.ok()) {
      return s;
    }
  }
  if (table.rows == 0) return FileError(name, "no data rows");
  return table;
}

}  // namespace

absl::StatusOr<Table> ParseDigitsCsv(absl::string_view text,
                                     const std::string& name) {
  return ParseNumericRows(Lines(text), 0, kDigitsValues, name);
}

absl::StatusOr<Table> ParseSklearnCsv(absl::string_view text,
                                      const std::string& name) {
  const auto lines = Lines(text);
  if (lines.empty()) return FileError(name, "empty file");
  const std::vector<absl::string_view> header = Fields(lines[0].second);
  int64_t rows = 0, features = 0;
  if (header.size() < 2 || !absl::SimpleAtoi(header[0], &rows) ||
      !absl::SimpleAtoi(header[1], &features) || rows < 1 || features < 1) {
    return RowError(name, lines[0].first,
                    absl::StrCat("expected a header 'rows,features,class "
                                 "names...', got '",
                                 lines[0].second, "'"));
  }
  absl::StatusOr<Table> table = ParseNumericRows(lines, 1, features + 1, name);
  if (!table.ok()) return table.status();
  if (table->rows != rows) {
    return FileError(
        name, absl::StrCat("header says ", rows, " rows, found ", table->rows));
  }
  for (size_t i = 2; i < header.size(); ++i) {
    table->label_names.emplace_back(header[i]);
  }
  return table;
}

absl::StatusOr<Table> ParseCsv(absl::string_view text, const std::string& name,
                               const std::string& label_column) {
  const auto lines = Lines(text);
  if (lines.empty()) return FileError(name, "empty file (expected a header)");
  const std::vector<absl::string_view> header = Fields(lines[0].second);
  const int64_t header_line = lines[0].first;
  int64_t label = -1;
  std::set<absl::string_view> seen;
  Table table;
  for (size_t k = 0; k < header.size(); ++k) {
    if (!seen.insert(header[k]).second) {
      return RowError(name, header_line,
                      absl::StrCat("duplicate column '", header[k], "'"));
    }
    if (header[k] == label_column) {
      label = k;
    } else {
      table.feature_names.emplace_back(header[k]);
    }
  }
  if (label < 0) {
    return RowError(name, header_line,
                    absl::StrCat("no label column '", label_column,
                                 "' (columns: ", absl::StrJoin(header, ", "),
                                 "; set data.label_column)"));
  }
  const int64_t width = header.size();
  table.cols = width - 1;
  std::vector<std::string> label_text;
  bool text_labels = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto& [line, row] = lines[i];
    const std::vector<absl::string_view> fields = Fields(row);
    if (static_cast<int64_t>(fields.size()) != width) {
      return RowError(
          name, line,
          absl::StrCat("expected ", width, " values, got ", fields.size()));
    }
    for (int64_t k = 0; k < width; ++k) {
      const absl::string_view cell = fields[k];
      double value = 0;
      if (k == label) {
        if (IsMissing(cell)) {
          return RowError(
              name, line,
              absl::StrCat("column '", header[k], "': missing label"));
        }
        if (!ParseNumber(cell, &value)) text_labels = true;
        label_text.emplace_back(cell);
        table.y.push_back(value);
      } else if (IsMissing(cell)) {
        table.x.push_back(std::numeric_limits<float>::quiet_NaN());
        ++table.missing;
      } else if (ParseNumber(cell, &value)) {
        table.x.push_back(static_cast<float>(value));
      } else {
        return RowError(name, line,
                        absl::StrCat("column '", header[k], "': '", cell,
                                     "' is not a number"));
      }
    }
    ++table.rows;
    if (absl::Status s = CheckCells(name, table.rows, table.cols); !s.ok()) {
      return s;
    }
  }
  if (table.rows == 0) return FileError(name, "no data rows after the header");
  if (text_labels) {
    table.text_labels = true;
    // Class names: sorted distinct texts, y = the index of each row's name.
    std::map<std::string, int64_t> index;
    for (const std::string& t : label_text) index.emplace(t, 0);
    for (auto& [text, id] : index) {
      id = table.label_names.size();
      table.label_names.push_back(text);
    }
    for (int64_t r = 0; r < table.rows; ++r) {
      table.y[r] = static_cast<double>(index[label_text[r]]);
    }
  }
  return table;
}

absl::StatusOr<Table> ParseLibsvm(absl::string_view text,
                                  const std::string& name) {
  struct Row {
    double label;
    std::vector<std::pair<int64_t, float>> values;
  };
  std::vector<Row> rows;
  int64_t cols = 0;
  int64_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> tokens =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (tokens.empty()) continue;
    Row row;
    if (!ParseNumber(tokens[0], &row.label)) {
      return RowError(name, number,
                      absl::StrCat("label '", tokens[0], "' is not a number"));
    }
    std::set<int64_t> seen;
    for (size_t t = 1; t < tokens.size(); ++t) {
      const absl::string_view token = tokens[t];
      const size_t colon = token.find(':');
      if (colon == absl::string_view::npos) {
        return RowError(name, number,
                        absl::StrCat("'", token, "' is not index:value"));
      }
      const absl::string_view index_text = token.substr(0, colon);
      const absl::string_view value_text = token.substr(colon + 1);
      int64_t index;
      double value;
      if (!absl::SimpleAtoi(index_text, &index)) {
        return RowError(
            name, number,
            absl::StrCat("index '", index_text, "' is not an integer"));
      }
      if (index < 1) {
        return RowError(name, number,
                        absl::StrCat("index ", index, " is not >= 1"));
      }
      if (index > kMaxLibsvmIndex) {
        return RowError(
            name, number,
            absl::StrCat("index ", index, " is larger than ", kMaxLibsvmIndex));
      }
      if (!seen.insert(index).second) {
        return RowError(name, number,
                        absl::StrCat("index ", index, " appears twice"));
      }
      if (!ParseNumber(value_text, &value)) {
        return RowError(name, number,
                        absl::StrCat("value '", value_text, "' of index ",
                                     index, " is not a number"));
      }
      row.values.emplace_back(index, static_cast<float>(value));
      cols = std::max(cols, index);
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return FileError(name, "no data rows");
  if (absl::Status s = CheckCells(name, rows.size(), cols); !s.ok()) return s;
  Table table;
  table.rows = rows.size();
  table.cols = cols;
  table.x.assign(table.rows * cols, 0.0f);
  for (int64_t r = 0; r < table.rows; ++r) {
    table.y.push_back(rows[r].label);
    for (const auto& [index, value] : rows[r].values) {
      table.x[r * cols + index - 1] = value;
    }
  }
  return table;
}

absl::StatusOr<Table> ParseCriteoTsv(absl::string_view text,
                                     const std::string& name) {
  constexpr int64_t kNumeric = kCriteoNumeric, kCat = kCriteoCategorical;
  constexpr int64_t kFields = 1 + kNumeric + kCat;
  Table table;
  table.cols = kNumeric;
  table.cat_cols = kCat;
  for (const auto& [number, line] : Lines(text)) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    if (static_cast<int64_t>(fields.size()) != kFields) {
      return RowError(name, number,
                      absl::StrCat("expected ", kFields,
                                   " tab-separated fields (label, I1..I13, "
                                   "C1..C26), got ",
                                   fields.size()));
    }
    if (absl::Status s = CheckCells(name, table.rows + 1, kNumeric + kCat);
        !s.ok()) {
      return s;
    }
    int64_t label;
    if (!absl::SimpleAtoi(fields[0], &label) || (label != 0 && label != 1)) {
      return RowError(
          name, number,
          absl::StrCat("field 1 (label): '", fields[0], "' is not 0 or 1"));
    }
    table.y.push_back(label);
    for (int64_t k = 0; k < kNumeric; ++k) {
      const absl::string_view f = fields[1 + k];
      if (f.empty()) {
        table.x.push_back(std::numeric_limits<float>::quiet_NaN());
        ++table.missing;
        continue;
      }
      int64_t v;
      if (!absl::SimpleAtoi(f, &v)) {
        return RowError(name, number,
                        absl::StrCat("field ", 2 + k, " (I", k + 1, "): '", f,
                                     "' is not an integer"));
      }
      table.x.push_back(v >= 0 ? static_cast<float>(std::log1p(double(v)))
                               : static_cast<float>(v));
    }
    for (int64_t c = 0; c < kCat; ++c) {
      const absl::string_view f = fields[1 + kNumeric + c];
      if (f.empty()) {
        table.cat.push_back(kMissingField);
        continue;
      }
      uint64_t v;
      if (f.size() > 16 || !absl::SimpleHexAtoi(f, &v) ||
          !std::all_of(f.begin(), f.end(), absl::ascii_isxdigit)) {
        return RowError(name, number,
                        absl::StrCat("field ", 2 + kNumeric + c, " (C", c + 1,
                                     "): '", f, "' is not hexadecimal"));
      }
      table.cat.push_back(v);
    }
    ++table.rows;
  }
  return table;
}

std::string DataFilePath(const DataConfig& config) {
  if (!config.path().empty()) return config.path();
  if (config.source() == DataConfig::DIGITS ||
      config.source() == DataConfig::BREAST_CANCER) {
    return absl::StrCat(config.dir(), "/", ConfigName(config.source()), ".csv");
  }
  return "";
}

absl::StatusOr<Table> LoadTable(const DataConfig& config) {
  const std::string path = DataFilePath(config);
  const bool builtin = config.source() == DataConfig::DIGITS ||
                       config.source() == DataConfig::BREAST_CANCER;
  if (!builtin && config.source() != DataConfig::CSV &&
      config.source() != DataConfig::LIBSVM &&
      config.source() != DataConfig::CRITEO) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.source: '", ConfigName(config.source()), "' is not file data"));
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.path: is required with data.source ",
                     ConfigName(config.source())));
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data file '", path, "' is a directory"));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string message =
        absl::StrCat("cannot open data file '", path, "'",
                     builtin && config.path().empty()
                         ? " (run ./psctl setup to extract it from Debian's "
                           "python3-sklearn, or set data.path)"
                         : "");
    return errno == 0 || errno == ENOENT ? absl::NotFoundError(message)
                                         : absl::ErrnoToStatus(errno, message);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  }
  const std::string contents = text.str();
  if (config.source() == DataConfig::DIGITS)
    return ParseDigitsCsv(contents, path);
  if (config.source() == DataConfig::BREAST_CANCER)
    return ParseSklearnCsv(contents, path);
  if (config.source() == DataConfig::CRITEO) {
    return ParseCriteoTsv(contents, path);
  }
  if (config.source() == DataConfig::CSV) {
    return ParseCsv(contents, path, config.label_column());
  }
  return ParseLibsvm(contents, path);
}

}  // namespace pstrain
