// SPDX-License-Identifier: Apache-2.0
#include "launcher/versions.h"

#include <fmt/format.h>
#include <mpi.h>
#include <pmix.h>
#ifdef MAESTRO_HAVE_NCCL
#include <nccl.h>
#endif

namespace maestro::launcher {
std::string PmixVersion() {
  return PMIx_Get_version();
}
std::string MpiVersion() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  const auto nl = s.find_first_of("\r\n,");
  return nl == std::string::npos ? s : s.substr(0, nl);
}
std::string NcclVersion() {
#ifdef MAESTRO_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unavailable";
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
#else
  return "not built";
#endif
}
}  // namespace maestro::launcher
