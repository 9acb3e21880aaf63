// SPDX-License-Identifier: Apache-2.0
#include "cli/local_devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "base/checks.h"
#include "base/text.h"

namespace maestro::cli {

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Entries of a CUDA_VISIBLE_DEVICES value ("0,2", "GPU-<uuid>,...").
std::vector<std::string> SplitVisible(const std::string& value) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t comma = value.find(',', at);
    const size_t end = comma == std::string::npos ? value.size() : comma;
    if (end > at) out.push_back(value.substr(at, end - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string GpuLabel(const launcher::LocalGpu& g) {
  return fmt::format("GPU {} ({})", g.index, PrintableText(g.name));
}

// The name (CUDA's, or the fake's type) whose GPUs a plan uses: the one with
// the most GPUs, the first in the inventory on a tie.
std::string ChosenName(const launcher::GpuInventory& inventory) {
  std::map<std::string, int> count;
  for (const auto& g : inventory.gpus) ++count[g.name];
  std::string best;
  int most = 0;
  for (const auto& g : inventory.gpus) {
    if (count[g.name] > most) {
      most = count[g.name];
      best = g.name;
    }
  }
  return best;
}

// The value the ranks' CUDA_VISIBLE_DEVICES must have so that their CUDA
// ordinals 0..n-1 are `used` (ordinals of this process's view, `visible`
// its variable); "" when they already are.
StatusOr<std::string> VisibleFor(const std::vector<int>& used, const char* visible) {
  bool prefix = true;
  for (size_t i = 0; i < used.size(); ++i) prefix = prefix && used[i] == static_cast<int>(i);
  if (prefix) return std::string();
  std::vector<std::string> entries;
  if (visible != nullptr) {
    const std::vector<std::string> listed = SplitVisible(visible);
    for (int u : used) {
      if (u >= static_cast<int>(listed.size())) {
        return Status::InvalidArgument(fmt::format(
            "CUDA_VISIBLE_DEVICES='{}' lists {} device(s) but CUDA reports device {}; unset it or list every GPU",
            PrintableText(visible), listed.size(), u));
      }
      entries.push_back(listed[static_cast<size_t>(u)]);
    }
  } else {
    for (int u : used) entries.push_back(std::to_string(u));
  }
  return fmt::format("{}", fmt::join(entries, ","));
}

}  // namespace

StatusOr<DeviceChoice> ParseDeviceChoice(const std::string& text) {
  if (text == "auto") return DeviceChoice::kAuto;
  if (text == "cpu") return DeviceChoice::kCpu;
  if (text == "cuda") return DeviceChoice::kCuda;
  return Status::InvalidArgument(fmt::format("--device '{}': use auto, cpu or cuda", PrintableText(text)));
}

StatusOr<LocalDevices> ChooseLocalDevices(DeviceChoice choice, const launcher::GpuInventory& inventory, int ranks,
                                          const char* visible) {
  LocalDevices out;
  out.source = inventory.source;
  if (choice == DeviceChoice::kCpu) {
    out.cpu_reason = "--device cpu";
    return out;
  }
  if (inventory.gpus.empty()) {
    const std::string why = fmt::format("no GPUs ({})", inventory.why_none);
    if (choice == DeviceChoice::kCuda) {
      return Status::InvalidArgument(
          fmt::format("--device cuda: this machine has {}; train on the CPU with --device cpu (or auto)", why));
    }
    out.cpu_reason = why;
    return out;
  }
  out.gpus = true;
  out.gpu_name = ChosenName(inventory);
  out.type = compiler::LocalGpuTypeOf(out.gpu_name);
  int available = 0;
  for (const auto& g : inventory.gpus) available += g.name == out.gpu_name ? 1 : 0;
  if (ranks > available) {
    return Status::InvalidArgument(fmt::format(
        "--ranks {}: this machine has {} GPU(s) of type {} and a GPU rank has a GPU of its own; give --ranks {} or "
        "fewer, or --device cpu to run {} ranks on the CPU",
        ranks, available, out.type.type, available, ranks));
  }
  const int want = ranks > 0 ? ranks : available;
  for (const auto& g : inventory.gpus) {
    if (g.name != out.gpu_name) {
      out.idle.push_back(fmt::format("{}: not used: a plan runs on one GPU type, here the {} x {}", GpuLabel(g),
                                     available, PrintableText(out.gpu_name)));
    } else if (static_cast<int>(out.used.size()) >= want) {
      out.idle.push_back(fmt::format("{}: not used: --ranks {}", GpuLabel(g), ranks));
    } else {
      // The smallest memory among them (a fake may give equal names several sizes).
      out.memory_bytes = out.used.empty() ? g.memory_bytes : std::min(out.memory_bytes, g.memory_bytes);
      out.used.push_back(g.index);
    }
  }
  MAESTRO_ASSIGN_OR_RETURN(out.cuda_visible_devices, VisibleFor(out.used, visible));
  return out;
}

std::vector<std::string> GpuUseLines(const launcher::GpuInventory& inventory) {
  std::vector<std::string> lines;
  if (inventory.gpus.empty()) {
    lines.push_back(fmt::format("none ({}): maestro run trains on the CPU", inventory.why_none));
    return lines;
  }
  auto chosen = ChooseLocalDevices(DeviceChoice::kAuto, inventory, 0, nullptr);
  if (!chosen.ok()) return {chosen.status().message()};
  std::map<std::string, int> count;
  for (const auto& g : inventory.gpus) ++count[g.name];
  std::map<std::string, bool> said;
  for (const auto& g : inventory.gpus) {
    if (said[g.name]) continue;
    said[g.name] = true;
    const compiler::LocalGpuType type = compiler::LocalGpuTypeOf(g.name);
    std::string line = fmt::format("{} x {}", count[g.name], PrintableText(g.name));
    if (g.memory_bytes > 0) line += fmt::format(" ({} GiB)", (g.memory_bytes + kGiB / 2) / kGiB);
    line += type.has_profile ? fmt::format(": device profile {}", type.type)
                             : fmt::format(": type {}, no device profile (priced with the default tables)", type.type);
    line += g.name == chosen->gpu_name ? "; maestro run uses them, one rank each" : "; not used";
    lines.push_back(line);
    if (!type.note.empty() && g.name == chosen->gpu_name) lines.push_back("  note: " + type.note);
  }
  for (const auto& idle : chosen->idle) lines.push_back("  " + idle);
  return lines;
}

}  // namespace maestro::cli
