// SPDX-License-Identifier: Apache-2.0
// The allocator of the runtime's CPU tensors (host memory).
//
// Owns: InstallHostAllocator, which, under MAESTRO_HOST_ALLOCATOR=huge-pages,
// replaces libtorch's CPU allocator for the process. A tensor of 2 MiB or
// more then gets its own anonymous mapping, aligned to 2 MiB and advised for
// transparent huge pages (madvise MADV_HUGEPAGE), and is unmapped when freed;
// a smaller one is posix_memalign'd (64-byte aligned, as libtorch's own) and
// freed. PyTorch 2.2+ has the alignment and the advice under
// THP_MEM_ALLOC_ENABLE=1 (c10/core/alloc_cpu.cpp); Debian's libtorch 1.13
// has neither.
// What it gives:
//  - the resident set follows what the runtime holds: glibc keeps freed large
//    chunks resident once its mmap threshold has grown (up to 32 MiB), which
//    put a 27M decoder's peak 15% above its live tensors (1.26 GB against
//    1.09 GB). The memory suite checks the compiler's estimate against the
//    resident set (tests/runtime/memory_run_test.cc) and runs its workers on
//    it, with MALLOC_MMAP_THRESHOLD_=131072 for the smaller tensors;
//  - speed there: a large activation is faulted in as 2 MiB pages, not as
//    512 pages of 4 KiB (glibc maps a chunk barely over 2 MiB, such as
//    [1024 tokens x 512] fp32, unaligned: no huge page fits in it). The
//    memory suite's 13 tests took 594 s with the 128 KiB threshold alone,
//    394 s with both (two at a time on two cores).
// Why not the default: with glibc's default, a freed large tensor's memory
// is reused without a fault; fresh mappings cost 1.5-3.5% of the samples per
// second of `maestro-bench runtime --quick`'s tiny models (three alternated
// runs, docs/testing.md). The bytes a tensor holds are the same either way:
// results are bit-identical.
// GPU tensors and pinned host buffers have their own allocators: untouched.
// May call: base, c10 (the CPU allocator registry), POSIX mmap. Thread-safety: the
// allocator is; install it once, before the first tensor (first in main).
#pragma once

#include <cstddef>

#include "base/status.h"

namespace maestro::runtime {

// Tensors of at least this many bytes get their own huge-page mapping.
inline constexpr size_t kHostHugePageBytes = size_t{2} << 20;

// Under MAESTRO_HOST_ALLOCATOR=huge-pages, makes the huge-page host allocator
// libtorch's CPU allocator for this process and returns true; unset or
// "torch" (the default) returns false and changes nothing; any other value is
// kInvalidArgument naming both. Idempotent.
StatusOr<bool> InstallHostAllocator();

// The bytes the huge-page allocator has mapped now (tensors of
// kHostHugePageBytes or more that are alive), for tests.
size_t HostAllocatorMappedBytes();

}  // namespace maestro::runtime
