// SPDX-License-Identifier: Apache-2.0
#include "datalayer/checks.h"

#include <hdf5.h>

#include <mutex>

namespace maestro::datalayer::internal {

std::string SqliteDetail(sqlite3* db, const std::string& detail) {
  std::string out;
  if (db != nullptr) {
    out = sqlite3_errmsg(db);
    const char* file = sqlite3_db_filename(db, "main");
    if (file != nullptr && *file != '\0') out += std::string(" (database ") + file + ")";
  }
  if (!detail.empty()) out += out.empty() ? detail : ": " + detail;
  return out;
}

namespace {
herr_t InnermostMessage(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err != nullptr && err->desc != nullptr) {
    *out = std::string(err->func_name ? err->func_name : "?") + ": " + err->desc;
  }
  return 0;
}
}  // namespace

std::string Hdf5Detail(const std::string& detail) {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, InnermostMessage, &msg);
  if (msg.empty()) return detail;
  return detail.empty() ? msg : msg + ": " + detail;
}

void SilenceHdf5Errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

}  // namespace maestro::datalayer::internal
