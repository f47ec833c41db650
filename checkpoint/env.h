// The file operations a checkpoint needs, behind a small interface (leveldb's
// Env style) so tests can inject a crash between any two of them without
// sleeps or signals. Paths are plain strings; directories use '/'.
#ifndef PSTRAIN_CHECKPOINT_ENV_H_
#define PSTRAIN_CHECKPOINT_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

// A file opened for writing from scratch. Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  // Flushes to stable storage (fsync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
};

// Every operation returns an error naming the path and the OS reason.
// Implementations are thread-safe.
class CheckpointEnv {
 public:
  virtual ~CheckpointEnv() = default;

  // The real file system (POSIX); never deleted.
  static CheckpointEnv* Default();

  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Atomically replaces `to` (rename(2)).
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to) = 0;
  // Creates `path` and missing parents; OK if it exists.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // fsyncs a directory, making renames and creations in it durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // Names (not paths) in `path`, sorted; NOT_FOUND if it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) = 0;
  virtual bool IsDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual absl::Status DeleteFile(const std::string& path) = 0;
  // Removes an empty directory.
  virtual absl::Status DeleteDir(const std::string& path) = 0;
};

// Forwards every call to `target` (which must outlive it); tests override
// the calls they want to fail.
class CheckpointEnvWrapper : public CheckpointEnv {
 public:
  explicit CheckpointEnvWrapper(CheckpointEnv* target) : target_(target) {}
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return target_->ReadFile(path);
  }
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  absl::Status CreateDirs(const std::string& path) override {
    return target_->CreateDirs(path);
  }
  absl::Status SyncDir(const std::string& path) override {
    return target_->SyncDir(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override {
    return target_->ListDir(path);
  }
  bool IsDir(const std::string& path) override { return target_->IsDir(path); }
  bool FileExists(const std::string& path) override {
    return target_->FileExists(path);
  }
  absl::Status DeleteFile(const std::string& path) override {
    return target_->DeleteFile(path);
  }
  absl::Status DeleteDir(const std::string& path) override {
    return target_->DeleteDir(path);
  }

 private:
  CheckpointEnv* const target_;
};

}  // namespace pstrain

#endif  // PSTRAIN_CHECKPOINT_ENV_H_
