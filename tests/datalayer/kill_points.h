// SPDX-License-Identifier: Apache-2.0
// Test-only kill points inside HDF5's own writes, for fake_trainer: the
// process SIGKILLs itself right before a chosen pwrite(2) to an HDF5 spool
// file (a path ending in ".h5"), so a kill -9 lands exactly where a timer
// rarely does: inside H5Fflush, between the chunk index / object header
// writes and the superblock write that records the end of allocation
// (docs/datalayer.md, "kill -9 inside H5Fflush").
//
// How: kill_points.cc defines pwrite(2) in the executable. The dynamic
// linker binds libhdf5's calls to it (the executable comes first in the
// symbol lookup order); it forwards every call to the kernel and counts
// those to a ".h5" file. Link kill_points.cc into fake_trainer only, never
// into a library.
//
// May call: POSIX, Linux /proc. Thread safety: arm before any spool exists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace maestro::datalayer::testing {

enum class KillPoint {
  kSpoolWrite,       // the n-th pwrite to a .h5 file: raw chunks, metadata, superblock
  kSuperblockWrite,  // the n-th pwrite at offset 0 of a .h5 file: the superblock (EOA), last in a flush
};

struct KillAt {
  KillPoint point = KillPoint::kSpoolWrite;
  int64_t n = 1;  // 1-based, counted from the start of the process
};

// Parses "spool-write:N" or "superblock:N" (N >= 1); nullopt otherwise.
std::optional<KillAt> ParseKillAt(const std::string& text);

// From now on, SIGKILL this process right before the chosen write.
void ArmKillPoint(const KillAt& at);

}  // namespace maestro::datalayer::testing
