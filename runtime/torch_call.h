// SPDX-License-Identifier: Apache-2.0
// TorchCall: runs a piece of libtorch code and turns its exceptions (a
// c10::Error such as a shape mismatch or a bad archive, or any
// std::exception) into a Status naming what was being done.
// Runtime-internal (torch). May call: base, libtorch.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <exception>
#include <string>

#include "base/status.h"

namespace maestro::runtime {

template <typename Fn>
Status TorchCall(const std::string& what, Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return Status::Internal(fmt::format("{}: {}", what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("{}: {}", what, e.what()));
  }
  return Status::Ok();
}

}  // namespace maestro::runtime
