// SPDX-License-Identifier: Apache-2.0
// The readers of the spec's tables: [job], [cluster] with its
// [cluster.gpu.<type>], [data] with its [[data.modality]], [models.<name>],
// [[section]] (with its optimizer, loss and inputs), [[edge]], [[profile]].
//
// Owns: which keys each table has, their types, ranges and defaults
// (docs/spec.md documents each one), and the checks one table can make on
// its own (a name's spelling, a value that cannot go on an #SBATCH line, a
// model's shape). Checks across tables live in compiler/spec_graph.h.
// Where: spec_tables.cc ([job], [cluster], [data], [[section]], [[edge]],
// [[profile]]), spec_models.cc ([models.<name>]: ReadModel).
// May call: compiler/spec_types.h, compiler/toml_reader.h, compiler/model.h, base, plan, TOML++,
// fmt. Internal to maestro_compiler (includes TOML++ through toml_reader.h):
// include it only from compiler/*.cc.
// Thread safety: pure functions of their arguments (errors go to `d`).
#pragma once

#include <string>
#include <vector>

#include "compiler/spec_types.h"
#include "compiler/toml_reader.h"

namespace maestro::compiler::internal {

// A path the spec wrote (`rel`), relative to the spec's folder `base`; an
// absolute one, or any path when the folder is ".", as written.
std::string JoinPath(const std::string& base, const std::string& rel);

void ReadJob(Diagnostics& d, const toml::table& t, JobSpec& job);
void ReadCluster(Diagnostics& d, const toml::table& t, const std::string& base_dir, ClusterSpec& c);
void ReadData(Diagnostics& d, const toml::table& t, const std::string& base_dir, DataSpec& data);
// [models.<name>] (`pos` is the name's position): an imported hf_config
// (joined to `base_dir`) or a built-in shape of a `kind`.
void ReadModel(Diagnostics& d, const std::string& name, const toml::table& t, SourcePos pos,
               const std::string& base_dir, ModelSpec& m);
// A [[section]]; its `inputs` become edges appended to `edges`.
void ReadSection(Diagnostics& d, const toml::table& t, SectionSpec& s, std::vector<EdgeSpec>& edges,
                 const std::string& base_dir);
void ReadEdge(Diagnostics& d, const toml::table& t, EdgeSpec& e);
void ReadProfile(Diagnostics& d, const toml::table& t, ProfileSpec& p);

}  // namespace maestro::compiler::internal
