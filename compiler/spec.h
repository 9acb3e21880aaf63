// SPDX-License-Identifier: Apache-2.0
// The workload spec (spec.toml): the entry points that read it and run the
// semantic validation that turns it into a section graph. Its in-memory
// form (one struct per table, the limits, the located messages) is
// compiler/spec_types.h, which this header includes, so its users see both.
//
// Owns: every key of the spec format (docs/spec.md documents each one, with
// its default), the file:line:col error messages (with a suggestion for a
// misspelled key or name), and the checks that need no cost model: unknown
// sections in edges, cycles, unknown GPU types or modalities, contradictory
// pins. The checks that need the cost model (a section that fits at no
// configuration, a budget too small) live in compiler/compile.cc.
// May call: base, plan (ModelDesc), scheduler/problem.h (its limits),
// compiler/model.h, TOML++, nlohmann-json.
// Where: spec.cc (the entry points below), compiler/spec_types.h (the
// values), compiler/toml_reader.h (the TOML reader, its messages),
// compiler/spec_tables.h (each table's keys), compiler/spec_graph.h (the
// checks across tables).
// Thread safety: ParseSpec* are pure functions.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/spec_types.h"

namespace maestro::compiler {

// Parses and validates. On failure the Status (InvalidArgument) carries one
// line per problem, each "file:line:col: message", at most 20.
StatusOr<Spec> ParseSpecFile(const std::string& path);
// `text` is the spec's contents, `path` only names it in messages, and
// relative paths inside it (HF configs, manifest) start at `base_dir`.
StatusOr<Spec> ParseSpecString(const std::string& text, const std::string& path, const std::string& base_dir);

}  // namespace maestro::compiler
