// SPDX-License-Identifier: Apache-2.0
#include "cli/issue_calibration.h"

#include <cstdio>
#include <string>

#include "base/checks.h"
#include "base/files.h"
#include "base/read_file.h"
#include "compiler/device_profile.h"
#include "compiler/step_model.h"
#include "plan/issue_probe.h"

namespace maestro::cli {
namespace {

using nlohmann::json;

// A positive number at probe[key], or InvalidArgument naming the field.
StatusOr<double> PositiveSeconds(const json& probe, const char* key) {
  const auto it = probe.find(key);
  if (it == probe.end() || !it->is_number() || !(it->get<double>() > 0)) {
    return Status::InvalidArgument(std::string("/issue_probe/") + key + " must be a positive number of seconds");
  }
  return it->get<double>();
}

// The string at j[key], or "" (json::value trips g++'s -Wnull-dereference).
std::string StringAt(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get_ref<const std::string&>() : std::string();
}

}  // namespace

StatusOr<bool> AddIssueCost(json* profile) {
  json& doc = *profile;
  if (!doc.contains("issue_probe") || StringAt(doc, "device") != "cuda") return false;
  const json& probe = doc.at("issue_probe");
  if (!probe.is_object()) return Status::InvalidArgument("/issue_probe must be an object");
  MAESTRO_ASSIGN_OR_RETURN(const double forward, PositiveSeconds(probe, "forward_seconds"));
  MAESTRO_ASSIGN_OR_RETURN(const double backward, PositiveSeconds(probe, "backward_seconds"));
  const std::string precision = StringAt(probe, "precision");
  if (precision != "mixed") {
    return Status::InvalidArgument("/issue_probe/precision is \"" + precision +
                                   "\"; the issue cost is measured under autocast (\"mixed\")");
  }
  // The kernels are counted whatever the device's tables; the built-in
  // profile serves (the count does not depend on its rates).
  MAESTRO_ASSIGN_OR_RETURN(const compiler::DeviceProfile any,
                           compiler::BuiltinDeviceProfile(compiler::kDefaultDeviceProfile));
  const plan::ModelDesc desc = plan::IssueProbeVit();
  const compiler::PassShape shape = compiler::SectionSpeedShape(desc, plan::kIssueProbeImages, 1, precision);
  MAESTRO_ASSIGN_OR_RETURN(const compiler::PassTimes pass, compiler::PredictSectionPass(desc, shape, any));
  const double kernels = pass.detail.tracked_kernels;
  if (!(kernels > 0)) return Status::Internal("AddIssueCost: the step model counts no kernels in the issue probe");
  const double us = (forward + backward) / kernels * 1e6;
  char seconds[96];
  std::snprintf(seconds, sizeof seconds, "forward %.4g s + backward %.4g s over %.0f kernels", forward, backward,
                kernels);
  doc["training_issue_us"] = {
      {"value", us},
      {"source", std::string("what one autograd-tracked kernel of a training step costs the CPU to issue under "
                             "autocast: the issue probe (") +
                     seconds +
                     ", the step model's count of that step's tracked kernels: compiler/step_sum.h); probe: " +
                     StringAt(probe, "source")}};
  return true;
}

StatusOr<bool> AddIssueCostToFile(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path, 64 << 20, "device profile"));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(path + ": not JSON");
  auto added = AddIssueCost(&doc);
  if (!added.ok()) return Status(added.status().code(), path + ": " + added.status().message());
  if (!*added) return false;
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically(path, doc.dump(2) + "\n"));
  return true;
}

}  // namespace maestro::cli
