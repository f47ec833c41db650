#include "worker/data/tabular_loaders.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Writes `text` to a fresh file under TEST_TMPDIR and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

Table MustLoad(const DataConfig& config) {
  absl::StatusOr<Table> table = LoadTable(config);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : Table();
}

DataConfig FileConfig(const std::string& source, const std::string& path) {
  DataConfig config = DefaultJobConfig().data();
  DataConfig::DataSource value;  // the proto name is the YAML one upper-cased
  EXPECT_TRUE(
      DataConfig::DataSource_Parse(absl::AsciiStrToUpper(source), &value))
      << source;
  config.set_source(value);
  config.set_path(path);
  return config;
}

// The error of loading `text` as `source`, which must be INVALID_ARGUMENT.
std::string LoadError(const std::string& source, const std::string& name,
                      const std::string& text) {
  const std::string path = WriteFile(name, text);
  absl::StatusOr<Table> table = LoadTable(FileConfig(source, path));
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument)
      << table.status();
  return std::string(table.status().message());
}

// A file that must be refused, and what the error must say.
struct BadFile {
  std::string text;
  std::string error;
};

// Expects each of `files`, written as `name` and loaded as `source`, to be
// refused (LoadError) with an error that contains its `error`.
void ExpectRefused(const std::string& source, const std::string& name,
                   const std::vector<BadFile>& files) {
  for (const BadFile& f : files) {
    EXPECT_THAT(LoadError(source, name, f.text), HasSubstr(f.error))
        << "loading as " << source << ":\n"
        << f.text;
  }
}

TEST(TabularLoadersTest, DigitsFixture) {
  DataConfig config = FileConfig("digits", "worker/data/testdata/digits_5.csv");
  const Table t = MustLoad(config);
  EXPECT_EQ(t.rows, 5);
  EXPECT_EQ(t.cols, 64);
  EXPECT_EQ(t.x.size(), 5u * 64);
  EXPECT_THAT(t.y, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(t.x[2], 5.0f);  // row 0: 0,0,5,13,...
  EXPECT_EQ(t.x[64 + 3], 12.0f);
  EXPECT_EQ(t.missing, 0);
}

TEST(TabularLoadersTest, DigitsErrorsNameFileAndLine) {
  std::string good;
  for (int k = 0; k < 64; ++k) good += "1,";
  good += "7\n";
  std::string short_row;
  for (int k = 0; k < 63; ++k) short_row += "1,";
  short_row += "7\n";
  std::string text;
  for (int i = 0; i < 16; ++i) text += good;
  std::string bad = good;
  bad.replace(0, 1, "x");
  ExpectRefused(
      "digits", "digits.csv",
      {{text + short_row, "digits.csv:17: expected 65 values, got 64"},
       {good + bad, "digits.csv:2: value 1: 'x' is not a number"},
       {"\n\n", "digits.csv: no data rows"}});
}

TEST(TabularLoadersTest, BuiltInFilesComeFromDirAndMissingIsNotFound) {
  DataConfig config = DefaultJobConfig().data();
  config.set_source(DataConfig::DIGITS);
  config.set_dir("/nonexistent/datasets");
  EXPECT_EQ(DataFilePath(config), "/nonexistent/datasets/digits.csv");
  absl::StatusOr<Table> t = LoadTable(config);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("'/nonexistent/datasets/digits.csv'"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("psctl setup"));
  config.set_source(DataConfig::BREAST_CANCER);
  EXPECT_EQ(DataFilePath(config), "/nonexistent/datasets/breast_cancer.csv");
  config.set_path("/elsewhere/bc.csv");  // path wins
  EXPECT_EQ(DataFilePath(config), "/elsewhere/bc.csv");

  t = LoadTable(FileConfig("csv", "/nonexistent/x.csv"));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("/nonexistent/x.csv"));
  EXPECT_EQ(LoadTable(FileConfig("csv", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TabularLoadersTest, SklearnCsvWithHeader) {
  const std::string path = WriteFile(
      "bc.csv", "3,2,malignant,benign\n1.5,2,0\n3,4.25,1\r\n\n5,6,1\n");
  const Table t = MustLoad(FileConfig("breast_cancer", path));
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.cols, 2);
  EXPECT_THAT(t.x, ElementsAre(1.5, 2, 3, 4.25, 5, 6));
  EXPECT_THAT(t.y, ElementsAre(0, 1, 1));
  EXPECT_THAT(t.label_names, ElementsAre("malignant", "benign"));
  EXPECT_FALSE(t.text_labels);

  ExpectRefused(
      "breast_cancer", "bc.csv",
      {{"3,2,a,b\n1,2,0\n1,2,1\n", "bc.csv: header says 3 rows, found 2"},
       {"1,2,a,b\n1,2\n", "bc.csv:2: expected 3 values, got 2"},
       {"mean radius,x\n1,2,0\n",
        "bc.csv:1: expected a header 'rows,features"}});
}

TEST(TabularLoadersTest, CsvHeaderLabelByNameAndMissingValues) {
  const std::string path = WriteFile("x.csv",
                                     "age, \"income\" ,label,height\n"
                                     "30,1000,1,1.8\n"
                                     "\n"
                                     "NA,2000,0,\n"
                                     "45,nan,1,1.6\r\n"
                                     "50,NaN,2,1.7\n");
  DataConfig config = FileConfig("csv", path);
  Table t = MustLoad(config);
  EXPECT_EQ(t.rows, 4);
  EXPECT_EQ(t.cols, 3);
  EXPECT_THAT(t.feature_names, ElementsAre("age", "income", "height"));
  EXPECT_THAT(t.y, ElementsAre(1, 0, 1, 2));
  EXPECT_EQ(t.missing, 4);
  EXPECT_TRUE(std::isnan(t.x[3 * 1 + 0]));  // NA
  EXPECT_TRUE(std::isnan(t.x[3 * 1 + 2]));  // empty
  EXPECT_TRUE(std::isnan(t.x[3 * 2 + 1]));  // nan
  EXPECT_TRUE(std::isnan(t.x[3 * 3 + 1]));  // NaN
  EXPECT_EQ(t.x[3 * 2 + 0], 45.0f);
  EXPECT_FLOAT_EQ(t.x[3 * 3 + 2], 1.7f);

  // Any column can be the label.
  config = FileConfig("csv", WriteFile("y.csv", "y,label\n1,2\n3,4\n"));
  config.set_label_column("y");
  t = MustLoad(config);
  EXPECT_THAT(t.feature_names, ElementsAre("label"));
  EXPECT_THAT(t.x, ElementsAre(2, 4));
  EXPECT_THAT(t.y, ElementsAre(1, 3));
}

TEST(TabularLoadersTest, CsvTextLabelsAreSortedClassNames) {
  const std::string path = WriteFile(
      "iris.csv", "a,b,species\n1,2,virginica\n3,4,setosa\n5,6,virginica\n");
  DataConfig config = FileConfig("csv", path);
  config.set_label_column("species");
  const Table t = MustLoad(config);
  EXPECT_TRUE(t.text_labels);
  EXPECT_THAT(t.label_names, ElementsAre("setosa", "virginica"));
  EXPECT_THAT(t.y, ElementsAre(1, 0, 1));
}

TEST(TabularLoadersTest, CsvErrorsNameFileLineAndColumn) {
  ExpectRefused(
      "csv", "x.csv",
      {{"age,label\n1,0\n2,1\n\n3,abc\nabc,1\n",
        "x.csv:6: column 'age': 'abc' is not a number"},
       {"age,label\n1,0\n2\n", "x.csv:3: expected 2 values, got 1"},
       {"age,label\n1,0\n2,NA\n", "x.csv:3: column 'label': missing label"},
       {"age,target\n1,0\n",
        "x.csv:1: no label column 'label' (columns: age, target"},
       {"a,a,label\n1,2,0\n", "x.csv:1: duplicate column 'a'"},
       {"a,label\n", "x.csv: no data rows"},
       {"a,label\n1e999,0\n", "x.csv:2: column 'a': '1e999' is not a number"}});
}

TEST(TabularLoadersTest, Libsvm) {
  const std::string path = WriteFile("a.libsvm",
                                     "# a comment line\n"
                                     "+1 1:0.5 3:-2\n"
                                     "-1\t2:1e-1  # trailing comment\n"
                                     "\n"
                                     "2 5:4\r\n");
  const Table t = MustLoad(FileConfig("libsvm", path));
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.cols, 5);  // the largest index
  EXPECT_THAT(t.y, ElementsAre(1, -1, 2));
  EXPECT_THAT(t.x, ElementsAre(0.5f, 0, -2, 0, 0,  //
                               0, 0.1f, 0, 0, 0,   //
                               0, 0, 0, 0, 4));
  EXPECT_EQ(t.missing, 0);
}

TEST(TabularLoadersTest, LibsvmErrorsNameFileAndLine) {
  ExpectRefused(
      "libsvm", "a.libsvm",
      {{"1 1:2\n0 2:1\n1 0:3\n", "a.libsvm:3: index 0 is not >= 1"},
       {"1 1:2\nyes 1:1\n", "a.libsvm:2: label 'yes' is not a number"},
       {"1 1:2 7\n", "a.libsvm:1: '7' is not index:value"},
       {"1 qid:2 1:1\n", "a.libsvm:1: index 'qid' is not an integer"},
       {"1 1:2 1:3\n", "a.libsvm:1: index 1 appears twice"},
       {"1 4:x\n", "a.libsvm:1: value 'x' of index 4 is not a number"},
       {"1 99999999:1\n", "a.libsvm:1: index 99999999 is larger than"},
       {"# nothing\n", "a.libsvm: no data rows"}});
}

}  // namespace
}  // namespace pstrain
