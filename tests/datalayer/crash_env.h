// SPDX-License-Identifier: Apache-2.0
// CrashEnv: the fault-injecting Env of the crash tests. It numbers every
// durable operation of the datalayer (file append / fsync / close / rename /
// remove / directory fsync, spool write / flush / commit, step and ingest
// commits) and, at operation number `crash_at`, ends the process with
// _exit(kCrashExitCode): no destructors, no flushes, like kill -9. An append
// chosen as the crash point first writes half of its bytes (a torn write).
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

#include "datalayer/env.h"

namespace maestro::datalayer::testing {

inline constexpr int kCrashExitCode = 99;

class CrashEnv final : public Env {
 public:
  explicit CrashEnv(long crash_at) : crash_at_(crash_at) {}
  long ops() const { return ops_; }

  Status BeforeDurableOp(DurableOp op, std::string_view target) override {
    Count(DurableOpName(op));
    return Env::BeforeDurableOp(op, target);
  }
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    Count("create");
    auto base = Env::NewWritableFile(path);
    if (!base.ok()) return base.status();
    return std::unique_ptr<WritableFile>(std::make_unique<File>(this, std::move(base).value()));
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    Count("rename");
    return Env::RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    Count("remove");
    return Env::RemoveFile(path);
  }
  Status SyncDir(const std::string& dir) override {
    Count("syncdir");
    return Env::SyncDir(dir);
  }

 private:
  class File final : public WritableFile {
   public:
    File(CrashEnv* env, std::unique_ptr<WritableFile> base) : env_(env), base_(std::move(base)) {}
    Status Append(std::string_view data) override {
      if (env_->Next()) {
        (void)base_->Append(data.substr(0, data.size() / 2));  // torn
        ::_exit(kCrashExitCode);
      }
      return base_->Append(data);
    }
    Status Sync() override {
      env_->Count("sync");
      return base_->Sync();
    }
    Status Close() override { return base_->Close(); }

   private:
    CrashEnv* env_;
    std::unique_ptr<WritableFile> base_;
  };

  bool Next() { return ++ops_ == crash_at_; }
  void Count(const char* /*what*/) {
    if (Next()) ::_exit(kCrashExitCode);
  }

  long crash_at_;
  long ops_ = 0;
};

}  // namespace maestro::datalayer::testing
