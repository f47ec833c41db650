// mlp_benchmark: throughput of one MLP training step (forward + backward) on
// a compute backend, and the GEMM TFLOP/s achieved by the step's matrix
// products alone (the same shapes run back to back on the backend, 2*m*n*k
// flops each, timed by wall clock around a Synchronize). Not a test: it
// prints figures.
//
// The step is timed three ways, side by side in interleaved rounds (median
// over rounds, load average recorded per round), with the copies each
// training path makes (issue 12, item 8):
//   host:     Model::LossAndGradient: weights in, gradient out into pageable
//             vectors, one copy per tensor (on CUDA through the staging
//             halves): the path before the device-resident trainer;
//   ps:       the parameter-server step as the trainer takes it: weights
//             in from a pinned HostBuffer (the pull buffer), the gradient out
//             once into another (the push buffer); on the CPU backend
//             neither is copied (Model::ShareParams, and the push encodes
//             from the model's gradient);
//   resident: the gradient only, weights already on the backend, nothing
//             out (the all-reduce on the device; the optimizer's copies not
//             included).
//
//   mlp_benchmark [--device=cpu|cuda|auto]
//                 [--sizes=64-128-10:128,512-1024-10:256] [--min_time_s=1]
//                 [--rounds=3]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_config.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "worker/compute/compute_backend.h"
#include "worker/model/model.h"

ABSL_FLAG(std::string, device, "cpu", "compute backend: cpu, cuda or auto");
ABSL_FLAG(std::string, sizes, "64-128-10:128,512-1024-10:256",
          "comma-separated MLPs as widths-joined-by-dashes:batch, e.g. "
          "4096-4096-4096-10:1024 (input, hidden..., classes; 1 class = "
          "regressor)");
ABSL_FLAG(std::string, activation, "relu", "relu, tanh or gelu");
ABSL_FLAG(double, min_time_s, 1.0,
          "time each measurement for at least this long (after warm-up)");
ABSL_FLAG(int, rounds, 3,
          "interleaved rounds of the three step variants (median reported)");

namespace pstrain {
namespace {

struct Size {
  std::string label;            // as given, e.g. "512-1024-10"
  std::vector<int64_t> widths;  // input, hidden..., outputs
  int64_t batch = 0;
};

absl::StatusOr<std::vector<Size>> ParseSizes(const std::string& text) {
  std::vector<Size> sizes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    Size size;
    size.label = parts[0];
    bool ok = parts.size() == 2 && absl::SimpleAtoi(parts[1], &size.batch) &&
              size.batch >= 1;
    for (absl::string_view w : absl::StrSplit(parts[0], '-')) {
      int64_t v = 0;
      ok = ok && absl::SimpleAtoi(w, &v) && v >= 1;
      size.widths.push_back(v);
    }
    if (!ok || size.widths.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sizes: bad entry '", item, "' (expected e.g. 512-1024-10:256)"));
    }
    sizes.push_back(size);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return sizes;
}

// Runs `step` twice to warm up, then until min_time has passed (at least 3
// times); returns seconds per call.
absl::StatusOr<double> TimePerCall(const std::function<absl::Status()>& step,
                                   absl::Duration min_time) {
  for (int i = 0; i < 2; ++i) PS_RETURN_IF_ERROR(step());
  const absl::Time start = absl::Now();
  int calls = 0;
  while (calls < 3 || absl::Now() - start < min_time) {
    PS_RETURN_IF_ERROR(step());
    ++calls;
  }
  return absl::ToDoubleSeconds(absl::Now() - start) / calls;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The first three fields of /proc/loadavg, or "unknown".
std::string LoadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "unknown";
  double a = 0, b = 0, c = 0;
  const int got = std::fscanf(f, "%lf %lf %lf", &a, &b, &c);
  std::fclose(f);
  if (got != 3) return "unknown";
  return absl::StrCat(a, " ", b, " ", c);
}

// One step's matrix products: per layer the forward product, the weight
// gradient and (except the first layer) the input gradient.
struct GemmShape {
  bool trans_a, trans_b;
  int64_t m, n, k;
};

std::vector<GemmShape> StepGemms(const Size& s) {
  std::vector<GemmShape> gemms;
  const int64_t n = s.batch;
  for (size_t l = 0; l + 1 < s.widths.size(); ++l) {
    const int64_t in = s.widths[l], out = s.widths[l + 1];
    gemms.push_back({false, false, n, out, in});            // Z = X W
    gemms.push_back({true, false, in, out, n});             // dW = X^T dZ
    if (l > 0) gemms.push_back({false, true, n, in, out});  // dX = dZ W^T
  }
  return gemms;
}

double Flops(const std::vector<GemmShape>& gemms) {
  double flops = 0;
  for (const GemmShape& g : gemms) flops += 2.0 * g.m * g.n * g.k;
  return flops;
}

// Seconds for one pass over `gemms` on random operands resident on the
// backend.
absl::StatusOr<double> TimeGemms(ComputeBackend* backend,
                                 const std::vector<GemmShape>& gemms,
                                 absl::Duration min_time) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  struct Operands {
    DeviceBuffer a, b, c;
  };
  std::vector<Operands> ops;
  for (const GemmShape& g : gemms) {
    Operands o;
    for (auto [buffer, size] :
         {std::pair{&o.a, g.m * g.k}, std::pair{&o.b, g.k * g.n},
          std::pair{&o.c, g.m * g.n}}) {
      PS_ASSIGN_OR_RETURN(*buffer, backend->Allocate(size));
      std::vector<float> host(size);
      for (float& x : host) x = normal(rng);
      PS_RETURN_IF_ERROR(backend->CopyToDevice(host.data(), size, buffer));
    }
    ops.push_back(std::move(o));
  }
  return TimePerCall(
      [&]() -> absl::Status {
        for (size_t i = 0; i < gemms.size(); ++i) {
          const GemmShape& g = gemms[i];
          PS_RETURN_IF_ERROR(backend->Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k,
                                           1.0f, ops[i].a, ops[i].b, 0.0f,
                                           &ops[i].c));
        }
        return backend->Synchronize();
      },
      min_time);
}

absl::Status RunSize(ComputeBackend* backend, const Size& s,
                     absl::Duration min_time) {
  JobConfig job = DefaultJobConfig();
  absl::Status activation = ApplyConfigOverride(
      "model.activation", absl::GetFlag(FLAGS_activation), &job);
  if (!activation.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--activation: ", activation.message()));
  }
  ModelConfig config = job.model();
  config.set_type(ModelConfig::MLP);
  config.set_input_dim(s.widths.front());
  config.mutable_hidden()->Clear();
  config.mutable_hidden()->Add(s.widths.begin() + 1, s.widths.end() - 1);
  config.set_num_classes(s.widths.back());
  config.set_classifier(config.num_classes() >= 2);
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::Create(config, backend));

  std::vector<std::vector<float>> params;
  for (const auto& spec : model->params()) {
    std::vector<float> v(NumElements(spec));
    InitialValues(spec, 0, v.size(), v.data());
    params.push_back(std::move(v));
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0, 1);
  Batch batch;
  batch.n = s.batch;
  batch.dim = config.input_dim();
  batch.x.resize(batch.n * batch.dim);
  for (float& x : batch.x) x = normal(rng);
  for (int64_t i = 0; i < batch.n; ++i) {
    batch.y.push_back(config.num_classes() >= 2 ? i % config.num_classes()
                                                : normal(rng));
  }
  // The three variants (see the top of this file), timed in interleaved
  // rounds.
  std::vector<std::vector<float>> grads;
  const int64_t total = model->num_params();
  PS_ASSIGN_OR_RETURN(HostBuffer pulled, backend->AllocateHost(total));
  PS_ASSIGN_OR_RETURN(HostBuffer pushed, backend->AllocateHost(total));
  TensorViews weights;  // in `pulled`, as the trainer's pull leaves them
  int64_t offset = 0;
  for (const std::vector<float>& p : params) {
    std::copy(p.begin(), p.end(), pulled.data() + offset);
    weights.emplace_back(pulled.data() + offset, p.size());
    offset += p.size();
  }
  PS_RETURN_IF_ERROR(model->SetParams(weights));
  const std::vector<std::pair<const char*, std::function<absl::Status()>>>
      variants = {
          {"host",
           [&]() -> absl::Status {
             return model->LossAndGradient(params, batch, &grads).status();
           }},
          {"ps",
           [&]() -> absl::Status {
             PS_RETURN_IF_ERROR(model->ShareParams(weights));
             PS_RETURN_IF_ERROR(model->ComputeGradient(batch, false).status());
             if (backend->host_memory()) return absl::OkStatus();
             return backend->CopyToHost(*model->gradient(), total,
                                        pushed.data());
           }},
          {"resident",
           [&]() -> absl::Status {
             PS_RETURN_IF_ERROR(model->ComputeGradient(batch, false).status());
             return backend->Synchronize();
           }},
      };
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::vector<std::vector<double>> seconds(variants.size());
  std::vector<std::vector<double>> ratios(variants.size());
  for (int r = 0; r < rounds; ++r) {
    std::printf("  round %d, load average %s\n", r + 1, LoadAverage().c_str());
    for (size_t v = 0; v < variants.size(); ++v) {
      PS_ASSIGN_OR_RETURN(const double t,
                          TimePerCall(variants[v].second, min_time));
      seconds[v].push_back(t);
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      ratios[v].push_back(seconds[0].back() / seconds[v].back());
    }
  }
  const double step_s = Median(seconds[1]);  // the ps step, as trained
  model.reset();  // free its buffers before the GEMM operands

  const std::vector<GemmShape> gemms = StepGemms(s);
  PS_ASSIGN_OR_RETURN(const double gemm_s, TimeGemms(backend, gemms, min_time));
  const double flops = Flops(gemms);
  std::printf(
      "mlp %s batch %lld: %.0f samples/s (ps step, %.3f ms/step, step GEMMs "
      "at %.3f TFLOP/s); GEMMs alone: %.3f TFLOP/s (%.3f ms for %.2f "
      "GFLOP)\n",
      s.label.c_str(), static_cast<long long>(s.batch), s.batch / step_s,
      step_s * 1e3, flops / step_s * 1e-12, flops / gemm_s * 1e-12,
      gemm_s * 1e3, flops * 1e-9);
  for (size_t v = 0; v < variants.size(); ++v) {
    std::printf(
        "  %-8s step: %.0f samples/s (median of %d rounds), %.2fx the host "
        "step (median of per-round ratios)\n",
        variants[v].first, s.batch / Median(seconds[v]), rounds,
        Median(ratios[v]));
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Run() {
  PS_ASSIGN_OR_RETURN(const std::vector<Size> sizes,
                      ParseSizes(absl::GetFlag(FLAGS_sizes)));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend,
                      CreateComputeBackend(absl::GetFlag(FLAGS_device)));
  std::printf(
      "compute backend: %s; activation %s; step = forward + backward "
      "with the host<->backend copies of each path (host, ps, resident)\n",
      backend->name().c_str(), absl::GetFlag(FLAGS_activation).c_str());
  const absl::Duration min_time =
      absl::Seconds(std::max(0.0, absl::GetFlag(FLAGS_min_time_s)));
  for (const Size& s : sizes)
    PS_RETURN_IF_ERROR(RunSize(backend.get(), s, min_time));
  return absl::OkStatus();
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "MLP training-step throughput and GEMM TFLOP/s on a compute backend.\n"
      "Usage: mlp_benchmark [--device=cpu|cuda|auto] "
      "[--sizes=512-1024-10:256,...]");
  absl::ParseCommandLine(argc, argv);
  const absl::Status st = pstrain::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "mlp_benchmark: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
