// The worker's CUDA device choice (pure: local rank, rank, explicit
// --cuda_device, CUDA_VISIBLE_DEVICES in the log) and the backend it leads
// to on this machine.
#include "worker/compute/worker_device.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "worker/compute/cuda/cuda_backend.h"
#include "worker/compute/cuda/cuda_plugin_loader.h"

namespace pstrain {
namespace {

WorkerDeviceOptions Options(int cuda_device = -1, int local_rank = -1,
                            const char* env = nullptr) {
  WorkerDeviceOptions o;
  o.device = "cuda";
  o.cuda_device = cuda_device;
  o.local_rank = local_rank;
  o.cuda_visible_devices = env;
  return o;
}

int Ordinal(const WorkerDeviceOptions& o, int rank, int visible) {
  absl::StatusOr<CudaDeviceChoice> c = ChooseCudaDevice(o, rank, visible);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? c->ordinal : -100;
}

TEST(ChooseCudaDeviceTest, RankModuloVisibleDevices) {
  EXPECT_EQ(Ordinal(Options(), 0, 1), 0);
  EXPECT_EQ(Ordinal(Options(), 3, 1), 0);
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(Ordinal(Options(), rank, 4), rank % 4) << rank;
  }
  absl::StatusOr<CudaDeviceChoice> own = ChooseCudaDevice(Options(), 1, 2);
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE(absl::StrContains(own->reason, "shared")) << own->reason;
  absl::StatusOr<CudaDeviceChoice> shared = ChooseCudaDevice(Options(), 5, 2);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->ordinal, 1);
  EXPECT_TRUE(absl::StrContains(shared->reason, "shared with rank 1"))
      << shared->reason;
  EXPECT_TRUE(absl::StrContains(shared->reason, "NCCL")) << shared->reason;
}

TEST(ChooseCudaDeviceTest, LocalRankWinsOverRank) {
  // Rank 7 of a job spread over hosts, second worker on its host.
  EXPECT_EQ(Ordinal(Options(-1, 1), 7, 4), 1);
  EXPECT_EQ(Ordinal(Options(-1, 0), 7, 4), 0);
  absl::StatusOr<CudaDeviceChoice> c = ChooseCudaDevice(Options(-1, 2), 7, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(absl::StrContains(c->reason, "local rank 2")) << c->reason;
}

TEST(ChooseCudaDeviceTest, ExplicitDeviceWins) {
  EXPECT_EQ(Ordinal(Options(3), 0, 4), 3);
  EXPECT_EQ(Ordinal(Options(0, 2), 5, 4), 0);
  absl::StatusOr<CudaDeviceChoice> c = ChooseCudaDevice(Options(2), 0, 4);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(absl::StrContains(c->reason, "--cuda_device 2")) << c->reason;
}

TEST(ChooseCudaDeviceTest, BadRequestsAreErrorsNamingTheFlag) {
  absl::StatusOr<CudaDeviceChoice> high = ChooseCudaDevice(Options(4), 0, 4);
  EXPECT_EQ(high.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(high.status().message(), "--cuda_device 4"))
      << high.status();
  EXPECT_TRUE(absl::StrContains(high.status().message(), "0..3"))
      << high.status();
  EXPECT_EQ(ChooseCudaDevice(Options(-2), 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CudaDeviceChoice> local =
      ChooseCudaDevice(Options(-1, -5), 0, 4);
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(local.status().message(), "--local_rank"))
      << local.status();
  absl::StatusOr<CudaDeviceChoice> none =
      ChooseCudaDevice(Options(-1, -1, ""), 0, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(none.status().message(), "CUDA_VISIBLE_DEVICES="))
      << none.status();
}

TEST(ChooseCudaDeviceTest, NamesThePhysicalDeviceFromCudaVisibleDevices) {
  absl::StatusOr<CudaDeviceChoice> c =
      ChooseCudaDevice(Options(-1, -1, "4,5"), 3, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ordinal, 1);
  EXPECT_TRUE(absl::StrContains(c->reason, "physical 5")) << c->reason;
  // A list that does not match the visible count is only quoted.
  absl::StatusOr<CudaDeviceChoice> odd =
      ChooseCudaDevice(Options(-1, -1, "GPU-1a2b,7,9"), 0, 2);
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_TRUE(absl::StrContains(odd->reason, "CUDA_VISIBLE_DEVICES=GPU-1a2b"))
      << odd->reason;
  EXPECT_FALSE(absl::StrContains(odd->reason, "physical")) << odd->reason;
}

TEST(CreateWorkerBackendTest, DevicesOnThisMachine) {
  WorkerDeviceOptions cpu;
  cpu.device = "cpu";
  absl::StatusOr<WorkerBackend> on_cpu = CreateWorkerBackend(cpu, 3);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_TRUE(absl::StartsWith(on_cpu->backend->name(), "cpu"));

  WorkerDeviceOptions unknown;
  unknown.device = "tpu";
  EXPECT_EQ(CreateWorkerBackend(unknown, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  WorkerDeviceOptions any;
  any.device = "auto";
  absl::StatusOr<WorkerBackend> on_any = CreateWorkerBackend(any, 0);
  ASSERT_TRUE(on_any.ok()) << on_any.status();
  absl::StatusOr<WorkerBackend> on_cuda = CreateWorkerBackend(Options(), 0);
  absl::StatusOr<int> visible = CudaDeviceCount();
  if (visible.ok()) {
    ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
    EXPECT_TRUE(absl::StartsWith(on_any->backend->name(), "cuda"));
    EXPECT_TRUE(absl::StrContains(on_cuda->description, "CUDA device 0"))
        << on_cuda->description;
    EXPECT_EQ(CreateWorkerBackend(Options(*visible), 0).status().code(),
              absl::StatusCode::kInvalidArgument);
  } else {
    std::printf("no CUDA here (%s): auto is the CPU, cuda fails\n",
                std::string(visible.status().message()).c_str());
    EXPECT_TRUE(absl::StartsWith(on_any->backend->name(), "cpu"));
    EXPECT_TRUE(absl::StrContains(on_any->description, "auto"))
        << on_any->description;
    EXPECT_EQ(on_cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(on_cuda.status().message(), "cuda"))
        << on_cuda.status();
  }
}

// Which CUDA libraries this process has mapped (from /proc/self/maps).
std::string MappedCudaLibraries() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    for (const char* lib : {"libcudart", "libcublas", "libnccl"}) {
      if (absl::StrContains(line, lib) && !absl::StrContains(found, lib)) {
        absl::StrAppend(&found, lib, " ");
      }
    }
  }
  return found;
}

// The worker links no CUDA library: they come with libpstrain_cuda.so, which
// is loaded only when the driver reports a device and auto or cuda asks.
TEST(CudaPluginTest, CudaLibrariesLoadOnlyWithTheBackend) {
  WorkerDeviceOptions cpu;
  cpu.device = "cpu";
  ASSERT_TRUE(CreateWorkerBackend(cpu, 0).ok());
  EXPECT_FALSE(CudaPluginLoaded());
  EXPECT_EQ(MappedCudaLibraries(), "");

  WorkerDeviceOptions any;
  any.device = "auto";
  absl::StatusOr<WorkerBackend> on_any = CreateWorkerBackend(any, 0);
  ASSERT_TRUE(on_any.ok()) << on_any.status();
  if (absl::StartsWith(on_any->backend->name(), "cuda")) {
    EXPECT_TRUE(CudaPluginLoaded());
    EXPECT_TRUE(absl::StrContains(MappedCudaLibraries(), "libcublas"))
        << MappedCudaLibraries();
  } else {
    std::printf("auto chose %s; no CUDA library mapped\n",
                on_any->description.c_str());
    EXPECT_FALSE(CudaPluginLoaded());
    EXPECT_EQ(MappedCudaLibraries(), "");
  }
}

// Where the object is looked for, and what a wrong --cuda_library says.
TEST(CudaPluginTest, FindsTheObjectAndNamesAMissingOne) {
  const std::vector<std::string> paths = DefaultCudaPluginPaths();
  absl::Status built = ProbeCudaDriver().status();
  if (absl::StrContains(built.message(), "built without CUDA")) {
    std::printf("built without CUDA: no libpstrain_cuda.so to find\n");
    EXPECT_TRUE(paths.empty());
    return;
  }
  // This test has //worker:libpstrain_cuda.so in its runfiles, as
  // tests/gpu/check.sh's binaries do.
  bool found = false;
  for (const std::string& p : paths) {
    struct stat st;
    found = found || stat(p.c_str(), &st) == 0;
  }
  EXPECT_TRUE(found) << absl::StrJoin(paths, ", ");
  if (CudaPluginLoaded()) return;  // the object is already in; nothing to try
  WorkerDeviceOptions wrong = Options();
  wrong.cuda_library = "/nonexistent/libpstrain_cuda.so";
  absl::StatusOr<WorkerBackend> on_cuda = CreateWorkerBackend(wrong, 0);
  EXPECT_EQ(on_cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(on_cuda.status().message(),
                                "/nonexistent/libpstrain_cuda.so"))
      << on_cuda.status();
  EXPECT_TRUE(absl::StrContains(on_cuda.status().message(), "--cuda_library"))
      << on_cuda.status();
  wrong.device = "auto";
  absl::StatusOr<WorkerBackend> on_any = CreateWorkerBackend(wrong, 0);
  ASSERT_TRUE(on_any.ok()) << on_any.status();
  EXPECT_TRUE(absl::StrContains(on_any->description, "not found"))
      << on_any->description;
  EXPECT_EQ(MappedCudaLibraries(), "");
}

}  // namespace
}  // namespace pstrain
