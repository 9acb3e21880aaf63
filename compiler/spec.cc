// SPDX-License-Identifier: Apache-2.0
// The spec's entry points: reads the TOML text, hands each table to its
// reader (compiler/spec_tables.h), applies the cluster defaults and runs the
// graph checks (compiler/spec_graph.h). The TOML reader lives in
// compiler/toml_reader.h, the spec's values and the suggestions in
// compiler/spec_types.h.
#include "compiler/spec.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "base/checks.h"
#include "base/read_file.h"
#include "base/text.h"
#include "compiler/sample_mix.h"
#include "compiler/spec_graph.h"
#include "compiler/spec_tables.h"
#include "compiler/toml_reader.h"
#include "scheduler/problem.h"

namespace maestro::compiler {

static_assert(kMaxSections == scheduler::kMaxSections, "the spec's limit is the scheduler's");
static_assert(kMaxModalities == scheduler::kMaxModalities, "the spec's limit is the scheduler's");

using internal::Diagnostics;
using internal::PosOf;
using internal::TableReader;

StatusOr<Spec> ParseSpecString(const std::string& text, const std::string& path, const std::string& base_dir) {
  // plan.json and the JSON report hold the spec's path and paths relative to
  // its folder as JSON text, which must be UTF-8.
  for (const std::string* p : {&path, &base_dir}) {
    if (const size_t bad = Utf8ErrorOffset(*p); bad != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "{}: the spec's path is not valid UTF-8 (byte 0x{:02x} at offset {}{}); plan.json records it and the paths "
          "relative to it as UTF-8 text: rename the file or folder",
          PrintableText(path), static_cast<unsigned char>((*p)[bad]), bad, p == &base_dir ? " of its folder" : ""));
    }
  }
  Spec spec;
  spec.path = path;
  spec.base_dir = base_dir;
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(AtPos(path, PosOf(e.source()), std::string(e.description())));
  }
  Diagnostics d(path);
  TableReader top(d, root, "the spec");
  if (const toml::table* t = top.Table("job")) internal::ReadJob(d, *t, spec.job);
  if (const toml::table* t = top.Table("cluster")) {
    internal::ReadCluster(d, *t, base_dir, spec.cluster);
  } else if (!root.get("cluster")) {
    d.Error({}, "the spec needs a [cluster] table (nodes, gpus_per_node, [cluster.gpu.<type>])");
  }
  if (const toml::table* t = top.Table("data")) {
    internal::ReadData(d, *t, base_dir, spec.data);
  } else if (!root.get("data")) {
    d.Error({}, "the spec needs a [data] table (global_batch, seq_len)");
  }
  if (const toml::table* models = top.Table("models")) {
    for (const auto& [k, v] : *models) {
      ModelSpec m;
      if (const toml::table* mt = v.as_table()) {
        internal::ReadModel(d, std::string(k.str()), *mt, PosOf(k.source()), base_dir, m);
        spec.models.push_back(std::move(m));
      } else {
        d.Error(PosOf(v.source()), fmt::format("[models.{}] must be a table", std::string(k.str())));
      }
    }
  }
  // Reads each [[key]] table with `fn`; past `limit` tables, one error at
  // the first table too many and the rest is not read.
  auto each_table = [&](const char* key, size_t limit, const std::function<void(const toml::table&)>& fn) {
    const toml::node* n = top.Get(key);
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) {
      d.Error(PosOf(n->source()), fmt::format("'{}' must be an array of tables: write [[{}]]", key, key));
      return;
    }
    size_t read = 0;
    for (const auto& el : *arr) {
      if (read++ == limit) {
        d.Error(PosOf(el.source()), fmt::format("more than {} [[{}]] tables (this is one of {}): the runtime runs at "
                                                "most {}; merge some",
                                                limit, key, arr->size(), limit));
        return;
      }
      if (const toml::table* t = el.as_table()) {
        fn(*t);
      } else {
        d.Error(PosOf(el.source()), fmt::format("each [[{}]] must be a table", key));
      }
    }
  };
  each_table("section", kMaxSections, [&](const toml::table& t) {
    SectionSpec s;
    internal::ReadSection(d, t, s, spec.edges, base_dir);
    spec.sections.push_back(std::move(s));
  });
  each_table("edge", kMaxEdges, [&](const toml::table& t) {
    EdgeSpec e;
    internal::ReadEdge(d, t, e);
    spec.edges.push_back(std::move(e));
  });
  each_table("profile", std::numeric_limits<size_t>::max(), [&](const toml::table& t) {
    ProfileSpec p;
    internal::ReadProfile(d, t, p);
    spec.profiles.push_back(std::move(p));
  });
  top.Finish();
  if (spec.edges.size() > static_cast<size_t>(kMaxEdges)) {  // [[edge]] tables and sections' inputs
    d.Error(spec.edges[static_cast<size_t>(kMaxEdges)].pos,
            fmt::format("more than {} edges ({} with the sections' inputs): {} sections have at most {} distinct "
                        "edges in a DAG",
                        kMaxEdges, spec.edges.size(), kMaxSections, kMaxEdges));
  }
  // Cluster defaults flow into the GPU types.
  for (auto& g : spec.cluster.gpu_types) {
    if (g.nodes == 0) g.nodes = spec.cluster.nodes;
    if (g.gpus_per_node == 0) g.gpus_per_node = spec.cluster.gpus_per_node;
  }
  if (spec.cluster.default_gpu.empty() && !spec.cluster.gpu_types.empty()) {
    spec.cluster.default_gpu = spec.cluster.gpu_types.front().name;
  }
  if (d.ok()) internal::CheckGraph(d, spec);
  if (!d.ok()) return d.ToStatus();
  MAESTRO_RETURN_IF_ERROR(ResolveModalityMixes(spec));
  return spec;
}

StatusOr<Spec> ParseSpecFile(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxSpecBytes, "the spec file"));
  std::string base_dir = ".";
  const auto slash = path.rfind('/');
  if (slash != std::string::npos) base_dir = slash == 0 ? "/" : path.substr(0, slash);
  return ParseSpecString(text, path, base_dir);
}

}  // namespace maestro::compiler
