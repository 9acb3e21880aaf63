// SPDX-License-Identifier: Apache-2.0
#include "datalayer/crash_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace maestro::datalayer {

class CrashEnv::File final : public WritableFile {
 public:
  File(CrashEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  Status Append(std::string_view data) override {
    if (env_->IsCrashPoint("append", path_)) {
      (void)base_->Append(data.substr(0, data.size() / 2));  // torn
      ::_exit(kCrashExitCode);
    }
    return base_->Append(data);
  }
  Status Sync() override {
    env_->Count("sync", path_);
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }

 private:
  CrashEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

bool CrashEnv::IsCrashPoint(std::string_view kind, std::string_view target) {
  if (!filter_.empty()) {
    const std::string described = fmt::format("{} {}", kind, target);
    if (described.find(filter_) == std::string::npos) return false;
  }
  return ++ops_ == crash_at_;
}

void CrashEnv::Count(std::string_view kind, std::string_view target) {
  if (IsCrashPoint(kind, target)) ::_exit(kCrashExitCode);
}

Status CrashEnv::BeforeDurableOp(DurableOp op, std::string_view target) {
  Count(DurableOpName(op), target);
  return Env::BeforeDurableOp(op, target);
}

StatusOr<std::unique_ptr<WritableFile>> CrashEnv::NewWritableFile(const std::string& path) {
  Count("create", path);
  auto base = Env::NewWritableFile(path);
  if (!base.ok()) return base.status();
  return std::unique_ptr<WritableFile>(std::make_unique<File>(this, path, std::move(base).value()));
}

Status CrashEnv::RenameFile(const std::string& from, const std::string& to) {
  Count("rename", fmt::format("{} -> {}", from, to));
  return Env::RenameFile(from, to);
}

Status CrashEnv::RemoveFile(const std::string& path) {
  Count("remove", path);
  return Env::RemoveFile(path);
}

Status CrashEnv::RemoveDir(const std::string& path) {
  Count("rmdir", path);
  return Env::RemoveDir(path);
}

Status CrashEnv::SyncDir(const std::string& dir) {
  Count("syncdir", dir);
  return Env::SyncDir(dir);
}

StatusOr<CrashAt> CrashAtForRank(const char* value, int rank) {
  CrashAt at;
  if (value == nullptr || *value == '\0') return at;
  const std::string text(value);
  const size_t first = text.find(':');
  const size_t second = first == std::string::npos ? std::string::npos : text.find(':', first + 1);
  long target_rank = -1, n = 0;
  try {
    size_t used = 0;
    target_rank = std::stol(text.substr(0, first), &used);
    if (used != first) throw std::invalid_argument("rank");
    const std::string count =
        text.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
    n = std::stol(count, &used);
    if (used != count.size()) throw std::invalid_argument("n");
  } catch (const std::exception&) {
    target_rank = -1;
  }
  if (first == std::string::npos || target_rank < 0 || n < 1) {
    return Status::InvalidArgument(fmt::format(
        "{}='{}': expected RANK:N[:FILTER] (a world rank >= 0, an operation number >= 1)", kCrashAtVariable, text));
  }
  if (target_rank != rank) return at;
  at.n = n;
  if (second != std::string::npos) at.filter = text.substr(second + 1);
  return at;
}

Env* RankEnv(int rank) {
  static std::once_flag once;
  static Env* env = nullptr;
  std::call_once(once, [rank] {
    auto at = CrashAtForRank(std::getenv(kCrashAtVariable), rank);
    if (!at.ok()) {
      std::fprintf(stderr, "maestro: %s\n", at.status().ToString().c_str());
      std::_Exit(2);
    }
    // Leaked on purpose: it must outlive every thread that writes through it.
    env = at->n > 0 ? new CrashEnv(at->n, at->filter) : Env::Default();
  });
  return env;
}

}  // namespace maestro::datalayer
