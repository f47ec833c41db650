#include "tools/report/study_args.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace report_cli {
namespace {

// argv from strings (ParseStudyArgs reads argv[0..argc)).
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    for (std::string& a : args_) ptrs_.push_back(a.data());
  }
  int argc() const { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

// A spec like study-sparse's: --table ROWS=DIR, ROWS "1".."9"; and one
// other option, --steps, that must be "5".
struct Fixture {
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string steps;
  StudyArgsSpec spec;
  StudyArgs args;
  std::string error;

  Fixture() {
    spec.input_flag = "--table";
    spec.expected = "expected ROWS=DIR";
    spec.add_input = [this](const std::string& key, const std::string& dir) {
      if (key.size() != 1 || key[0] < '1' || key[0] > '9') return false;
      inputs.emplace_back(key, dir);
      return true;
    };
    spec.needs = "study-x needs --out DIR and --table ROWS=DIR";
    spec.other = [this](const std::string& n, const std::string& v,
                        std::string* bad) {
      if (n != "--steps") return false;
      if (v != "5") *bad = "--steps: expected 5, got '" + v + "'";
      steps = v;
      return true;
    };
  }
  StudyArgsError Parse(std::vector<std::string> a) {
    Argv argv(std::move(a));
    return ParseStudyArgs(argv.argc(), argv.argv(), spec, &args, &error);
  }
};

TEST(ParseStudyArgsTest, TakesSharedInputAndOtherOptions) {
  Fixture f;
  ASSERT_EQ(
      f.Parse({"--out", "o", "--table", "1=a=b", "--command", "c d", "--setup",
               "s", "--table", "2=x", "--steps", "5", "--gnuplot", ""}),
      StudyArgsError::kNone)
      << f.error;
  EXPECT_EQ(f.args.out, "o");
  EXPECT_EQ(f.args.command, "c d");
  EXPECT_EQ(f.args.setup, "s");
  ASSERT_TRUE(f.args.gnuplot.has_value());  // given, even empty
  EXPECT_EQ(*f.args.gnuplot, "");
  EXPECT_EQ(f.args.inputs, 2);
  const std::vector<std::pair<std::string, std::string>> want = {{"1", "a=b"},
                                                                 {"2", "x"}};
  EXPECT_EQ(f.inputs, want);  // split at the first '='
  EXPECT_EQ(f.steps, "5");
}

TEST(ParseStudyArgsTest, GnuplotAbsentWhenNotGiven) {
  Fixture f;
  ASSERT_EQ(f.Parse({"--table", "3=d", "--out", "o"}), StudyArgsError::kNone);
  EXPECT_FALSE(f.args.gnuplot.has_value());
}

TEST(ParseStudyArgsTest, BadInputValuesNamedWithTheFlagFirstOneCounts) {
  for (const char* bad : {"0=d", "x", "=d", "1=", "12=d"}) {
    Fixture f;
    EXPECT_EQ(f.Parse({"--out", "o", "--table", bad, "--table", "zz"}),
              StudyArgsError::kValue)
        << bad;
    EXPECT_EQ(f.error, std::string("--table ") + bad + ": expected ROWS=DIR");
    EXPECT_TRUE(f.inputs.empty());
  }
  Fixture f;
  EXPECT_EQ(f.Parse({"--steps", "6", "--table", "x", "--out", "o"}),
            StudyArgsError::kValue);
  EXPECT_EQ(f.error, "--steps: expected 5, got '6'");
}

TEST(ParseStudyArgsTest, UsageErrors) {
  Fixture f;
  EXPECT_EQ(f.Parse({"--out", "o", "--table", "1=d", "--nosuch", "v"}),
            StudyArgsError::kUsage);
  EXPECT_EQ(f.error, "unknown option '--nosuch'");
  Fixture g;
  EXPECT_EQ(g.Parse({"--table", "1=d", "--out"}), StudyArgsError::kUsage);
  EXPECT_EQ(g.error, "--out needs a value");
  // An unknown option wins over an earlier bad value.
  Fixture h;
  EXPECT_EQ(h.Parse({"--table", "x", "--nosuch", "v"}), StudyArgsError::kUsage);
  EXPECT_EQ(h.error, "unknown option '--nosuch'");
  // Without a callback for other options, every other option is unknown.
  Fixture k;
  k.spec.other = nullptr;
  EXPECT_EQ(k.Parse({"--steps", "5"}), StudyArgsError::kUsage);
  EXPECT_EQ(k.error, "unknown option '--steps'");
}

TEST(ParseStudyArgsTest, MissingOutOrInputIsAUsageError) {
  for (const std::vector<std::string>& a :
       std::vector<std::vector<std::string>>{{},
                                             {"--out", "o"},
                                             {"--table", "1=d"},
                                             {"--out", "", "--table", "1=d"}}) {
    Fixture f;
    EXPECT_EQ(f.Parse(a), StudyArgsError::kUsage);
    EXPECT_EQ(f.error, "study-x needs --out DIR and --table ROWS=DIR");
  }
}

}  // namespace
}  // namespace report_cli
}  // namespace pstrain
