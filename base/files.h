// SPDX-License-Identifier: Apache-2.0
// Files every module writes whole: the one way to create a directory and the
// one write-then-rename (plan.json, job.sbatch, report.txt, manifests, trace
// and timeline files, the step's exit file). The datalayer's durable files
// (index, spool, checkpoints) go through datalayer::Env instead, whose seam
// lets tests inject faults.
//
// Owns: CreateDirectories, WriteFully, WriteFileAtomically,
// WriteFilesAtomically (several outputs replaced together or not at all).
// May call: the C and C++ standard libraries, POSIX.
// Thread safety: two writers of the same path race on its ".tmp" file; every
// path has one writer in Maestro.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace maestro {

// Creates `dir` and its missing parents (mode 0755); an existing directory is
// fine. "" is the current directory. IOError names the path and the reason.
Status CreateDirectories(const std::string& dir);

// Writes all of `data` to the open descriptor `fd`, retrying short writes and
// EINTR. Returns 0, or the errno of the write that failed (the caller names
// the file). The one write loop of the tree (this file, datalayer::Env).
int WriteFully(int fd, std::string_view data);

// Writes `contents` to `path` atomically: to "<path>.tmp", fsync, chmod
// `mode`, rename over `path`. A failure leaves `path` as it was, removes the
// temporary file, and names the path and the reason.
Status WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode = 0644);
// The same for a file written from pieces, back to back (a header and the
// tensors of a weight file, without first copying them into one string).
Status WriteFileAtomically(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode = 0644);

struct FileToWrite {
  std::string path;
  std::string_view contents;
  mode_t mode = 0644;
};

// Writes `files` together (maestro-compile's plan.json, job.sbatch and
// report.txt): all replaced or none. A path that is a directory is found
// before anything is written; then every "<path>.tmp" is written and synced;
// a failure there removes every temporary and leaves every path as it was;
// only then are they renamed, in order (a rename that still fails, e.g. the
// folder changed meanwhile, removes the temporaries left and says which were
// replaced). Messages name the path, the step and the errno text.
Status WriteFilesAtomically(const std::vector<FileToWrite>& files);

}  // namespace maestro
