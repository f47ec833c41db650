#include "tools/report/data_export.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/data/data.h"

namespace pstrain {
namespace {

class Writer {
 public:
  explicit Writer(const std::string& path)
      : path_(path), file_(std::fopen(path.c_str(), "wb")) {
    if (file_ == nullptr) status_ = Failed("cannot create");
  }
  ~Writer() {
    if (file_ != nullptr) std::fclose(file_);
  }
  void Bytes(const void* data, size_t n) {
    if (!status_.ok() || n == 0) return;
    if (std::fwrite(data, 1, n, file_) != n) status_ = Failed("cannot write");
  }
  template <typename T>
  void Values(const std::vector<T>& v) {
    Bytes(v.data(), v.size() * sizeof(T));
  }
  void Int(int64_t v) { Bytes(&v, sizeof v); }
  absl::Status Close() {
    if (file_ != nullptr && std::fclose(file_) != 0 && status_.ok()) {
      status_ = Failed("cannot close");
    }
    file_ = nullptr;
    return status_;
  }

 private:
  absl::Status Failed(const char* what) {
    return absl::UnavailableError(
        absl::StrCat(what, " '", path_, "': ", std::strerror(errno)));
  }
  std::string path_;
  std::FILE* file_;
  absl::Status status_;
};

void Append(const Batch& b, std::vector<float>* x, std::vector<float>* y,
            std::vector<uint64_t>* cat) {
  x->insert(x->end(), b.x.begin(), b.x.end());
  y->insert(y->end(), b.y.begin(), b.y.end());
  cat->insert(cat->end(), b.cat.begin(), b.cat.end());
}

}  // namespace

absl::Status ExportRankData(const JobConfig& config, int rank,
                            int64_t from_step, int64_t to_step,
                            const std::string& path) {
  const int world = config.job().workers();
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank ", rank, ": must be in [0, job.workers = ", world, ")"));
  }
  const int64_t steps = config.training().steps();
  if (from_step < 0 || from_step > to_step || to_step > steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--steps ", from_step, ":", to_step,
        ": must satisfy 0 <= FROM <= TO <= training.steps = ", steps));
  }
  const int64_t accum =
      std::max<int64_t>(config.training().grad_accum_steps(), 1);
  const int64_t slice = config.training().local_batch() * accum;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                      DataSource::Create(config.data()));
  std::vector<float> x, y;
  std::vector<uint64_t> cat;
  int64_t dim = data->num_features(), num_cat = 0;
  for (int64_t t = from_step; t < to_step; ++t) {
    PS_ASSIGN_OR_RETURN(
        Batch b,
        data->TrainBatch(FirstExampleId(t, rank, world, slice), slice));
    dim = b.dim;
    num_cat = b.num_cat;
    Append(b, &x, &y, &cat);
  }
  // The whole test set: TestSlice of rank 0 of 1.
  PS_ASSIGN_OR_RETURN(Batch test, data->TestSlice(0, 1));
  if (test.n > 0) {
    dim = test.dim;
    num_cat = test.num_cat;
  }
  const std::string tmp = absl::StrCat(path, ".tmp");
  Writer w(tmp);
  w.Bytes(kDataExportMagic, 8);
  for (int64_t v : {int64_t{rank}, int64_t{world}, from_step, to_step, slice,
                    (to_step - from_step) * slice, dim, num_cat, test.n}) {
    w.Int(v);
  }
  w.Values(x);
  w.Values(y);
  w.Values(cat);
  w.Values(test.x);
  w.Values(test.y);
  w.Values(test.cat);
  absl::Status closed = w.Close();
  if (!closed.ok()) {
    std::remove(tmp.c_str());
    return closed;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", why));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
