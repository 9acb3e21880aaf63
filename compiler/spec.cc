// SPDX-License-Identifier: Apache-2.0
#include "compiler/spec.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "base/checks.h"
#include "base/shell.h"
#include "compiler/model.h"

namespace maestro::compiler {

namespace {

constexpr size_t kMaxErrors = 20;

SourcePos PosOf(const toml::source_region& r) {
  return SourcePos{static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

const char* TypeName(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// Shared error list of one parse.
class Diagnostics {
 public:
  explicit Diagnostics(std::string path) : path_(std::move(path)) {}
  void Error(SourcePos pos, const std::string& message) {
    if (errors_.size() < kMaxErrors) errors_.push_back(AtPos(path_, pos, message));
  }
  bool ok() const { return errors_.empty(); }
  Status ToStatus() const {
    std::string all;
    for (const auto& e : errors_) all += (all.empty() ? "" : "\n") + e;
    return Status::InvalidArgument(all);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> errors_;
};

// Reads the keys of one TOML table, remembers which were read, and reports
// the rest as unknown (with a suggestion).
class TableReader {
 public:
  TableReader(Diagnostics& d, const toml::table& t, std::string where) : d_(d), t_(t), where_(std::move(where)) {
    for (char c : where_) {
      if (c != '[' && c != ']') prefix_ += c;
    }
  }

  const toml::node* Get(const std::string& key) {
    known_.push_back(key);
    return t_.get(key);
  }
  SourcePos PosOfKey(const std::string& key) const {
    const toml::node* n = t_.get(key);
    return n ? PosOf(n->source()) : PosOf(t_.source());
  }
  SourcePos pos() const { return PosOf(t_.source()); }

  bool String(const std::string& key, std::string* out) {
    const toml::node* n = Get(key);
    if (!n) return false;
    if (auto* v = n->as_string()) {
      *out = v->get();
      return true;
    }
    TypeError(key, *n, "a string");
    return false;
  }
  bool Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi) {
    const toml::node* n = Get(key);
    if (!n) return false;
    auto* v = n->as_integer();
    if (!v) {
      TypeError(key, *n, "an integer");
      return false;
    }
    if (v->get() < lo || v->get() > hi) {
      d_.Error(PosOf(n->source()),
               fmt::format("{}.{} = {} is out of range; it must be in [{}, {}]", prefix_, key, v->get(), lo, hi));
      return false;
    }
    *out = v->get();
    return true;
  }
  bool Int(const std::string& key, int* out, int lo, int hi) {
    int64_t x = 0;
    if (!Int(key, &x, static_cast<int64_t>(lo), static_cast<int64_t>(hi))) return false;
    *out = static_cast<int>(x);
    return true;
  }
  bool Number(const std::string& key, double* out, double lo, double hi) {
    const toml::node* n = Get(key);
    if (!n) return false;
    double x = 0;
    if (auto* f = n->as_floating_point()) {
      x = f->get();
    } else if (auto* i = n->as_integer()) {
      x = static_cast<double>(i->get());
    } else {
      TypeError(key, *n, "a number");
      return false;
    }
    if (!(x >= lo && x <= hi)) {  // also rejects NaN
      d_.Error(PosOf(n->source()),
               fmt::format("{}.{} = {} is out of range; it must be in [{}, {}]", prefix_, key, x, lo, hi));
      return false;
    }
    *out = x;
    return true;
  }
  bool Bool(const std::string& key, bool* out) {
    const toml::node* n = Get(key);
    if (!n) return false;
    if (auto* v = n->as_boolean()) {
      *out = v->get();
      return true;
    }
    TypeError(key, *n, "a boolean (true or false)");
    return false;
  }
  bool StringList(const std::string& key, std::vector<std::string>* out, std::vector<SourcePos>* pos) {
    const toml::node* n = Get(key);
    if (!n) return false;
    auto* arr = n->as_array();
    if (!arr) {
      TypeError(key, *n, "an array of strings");
      return false;
    }
    for (const auto& el : *arr) {
      if (auto* s = el.as_string()) {
        out->push_back(s->get());
        pos->push_back(PosOf(el.source()));
      } else {
        d_.Error(PosOf(el.source()), fmt::format("{}.{}: every element must be a string", prefix_, key));
      }
    }
    return true;
  }
  const toml::table* Table(const std::string& key) {
    const toml::node* n = Get(key);
    if (!n) return nullptr;
    if (auto* t = n->as_table()) return t;
    TypeError(key, *n, "a table");
    return nullptr;
  }
  void RequireMissing(const std::string& key) { d_.Error(pos(), fmt::format("{} needs the key '{}'", where_, key)); }
  // Reports keys that no Get() asked for.
  void Finish() {
    for (const auto& [k, v] : t_) {
      const std::string key(k.str());
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      d_.Error(PosOf(k.source()), fmt::format("unknown key '{}' in {}{}", key, where_, Suggest(key, known_)));
    }
  }

 private:
  void TypeError(const std::string& key, const toml::node& n, const char* want) {
    d_.Error(PosOf(n.source()), fmt::format("{}.{} must be {}, not {}", prefix_, key, want, TypeName(n.type())));
  }

  Diagnostics& d_;
  const toml::table& t_;
  std::string where_;   // "[job]": names the table
  std::string prefix_;  // "job": prefixes a key in value messages ("job.time")
  std::vector<std::string> known_;
};

// Values that go on an `#SBATCH --opt=VALUE` line: no whitespace, quotes or
// shell metacharacters, so neither Slurm's parser nor a shell can split them.
bool IsSbatchValue(const std::string& s, const std::string& extra_chars) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool plain = IsPlainShellWord(std::string(1, c));
    if (!plain && extra_chars.find(c) == std::string::npos) return false;
  }
  return true;
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

bool IsSlurmTime(const std::string& s) {
  if (s == "UNLIMITED" || s == "infinite") return true;
  if (s.empty() || s.size() > 16) return false;
  int colons = 0, dashes = 0;
  for (char c : s) {
    if (c == ':') {
      ++colons;
    } else if (c == '-') {
      ++dashes;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return colons <= 2 && dashes <= 1 && s.front() != ':' && s.back() != ':' && s.front() != '-' && s.back() != '-';
}

std::string JoinPath(const std::string& base, const std::string& rel) {
  if (rel.empty() || rel.front() == '/' || base.empty() || base == ".") return rel;
  return base + "/" + rel;
}

// ---- sections of the spec ---------------------------------------------------

void ReadJob(Diagnostics& d, const toml::table& t, JobSpec& job) {
  TableReader r(d, t, "[job]");
  job.pos = r.pos();
  if (r.String("name", &job.name) && !IsIdentifier(job.name)) {
    d.Error(r.PosOfKey("name"), "job.name must be 1-64 letters, digits, '_' or '-'");
  }
  auto sbatch_word = [&](const char* key, std::string* out, const std::string& extra) {
    if (r.String(key, out) && !out->empty() && !IsSbatchValue(*out, extra)) {
      d.Error(r.PosOfKey(key), fmt::format("job.{} = '{}' contains a character that cannot go on an #SBATCH line "
                                           "(whitespace, quotes or shell metacharacters)",
                                           key, *out));
    }
  };
  sbatch_word("account", &job.account, "");
  sbatch_word("partition", &job.partition, "");
  sbatch_word("qos", &job.qos, "");
  sbatch_word("output", &job.output, "");
  sbatch_word("error", &job.error, "");
  if (r.String("time", &job.time) && !IsSlurmTime(job.time)) {
    d.Error(r.PosOfKey("time"), fmt::format("job.time = '{}' is not a Slurm time limit (e.g. \"90\", \"04:00:00\", "
                                            "\"2-00:00:00\")",
                                            job.time));
  }
  r.Bool("requeue", &job.requeue);
  r.Int("signal_seconds", &job.signal_seconds, 0, 65535);
  if (r.String("signal", &job.signal) && job.signal != "USR1" && job.signal != "USR2" && job.signal != "TERM") {
    d.Error(r.PosOfKey("signal"), fmt::format("job.signal = '{}' must be USR1, USR2 or TERM (the worker checkpoints "
                                              "on USR1 and TERM){}",
                                              job.signal, Suggest(job.signal, {"USR1", "USR2", "TERM"})));
  }
  if (r.String("work_dir", &job.work_dir) && !IsSingleLine(job.work_dir)) {
    d.Error(r.PosOfKey("work_dir"), "job.work_dir must be one line");
  }
  r.Int("steps", &job.steps, 0, int64_t{1} << 40);
  r.Int("checkpoint_every", &job.checkpoint_every, 0, int64_t{1} << 40);
  r.Number("comm_timeout_s", &job.comm_timeout_s, 0, 7 * 24 * 3600.0);
  std::string schedule;
  if (r.String("schedule", &schedule)) {
    // The spec's spellings -> scheduler::PolicyName (what plan.schedule_policy holds).
    static const std::vector<std::pair<std::string, std::string>> kPolicies = {{"wavefront", "wavefront"},
                                                                               {"fifo", "fifo"},
                                                                               {"fifo_contiguous", "fifo-contiguous"},
                                                                               {"fifo-contiguous", "fifo-contiguous"},
                                                                               {"balance_only", "balance"},
                                                                               {"balance", "balance"}};
    auto it = std::find_if(kPolicies.begin(), kPolicies.end(), [&](const auto& p) { return p.first == schedule; });
    if (it == kPolicies.end()) {
      d.Error(r.PosOfKey("schedule"),
              fmt::format("job.schedule = '{}' must be wavefront, fifo, fifo_contiguous or balance_only{}", schedule,
                          Suggest(schedule, {"wavefront", "fifo", "fifo_contiguous", "balance_only"})));
    } else {
      job.schedule = it->second;
    }
  }
  r.Finish();
}

void ReadCluster(Diagnostics& d, const toml::table& t, ClusterSpec& c) {
  TableReader r(d, t, "[cluster]");
  c.pos = r.pos();
  r.Int("nodes", &c.nodes, 1, 100000);
  r.Int("gpus_per_node", &c.gpus_per_node, 1, 1024);
  r.String("default_gpu", &c.default_gpu);
  if (const toml::table* gpus = r.Table("gpu")) {
    for (const auto& [k, v] : *gpus) {
      GpuTypeSpec g;
      g.name = std::string(k.str());
      g.pos = PosOf(k.source());
      if (!IsIdentifier(g.name))
        d.Error(g.pos, fmt::format("GPU type name '{}' must be letters, digits, '_' or '-'", g.name));
      const toml::table* gt = v.as_table();
      if (!gt) {
        d.Error(PosOf(v.source()), fmt::format("[cluster.gpu.{}] must be a table", g.name));
        continue;
      }
      TableReader gr(d, *gt, "[cluster.gpu." + g.name + "]");
      gr.Bool("cpu", &g.cpu);
      if (g.cpu) {
        g.memory_gb = 4;
        g.tflops_bf16 = 0.1;
        g.intra_node_gbps = 5;
        g.inter_node_gbps = 1;
        g.mfu = 0.5;
      }
      gr.Number("memory_gb", &g.memory_gb, 1e-3, 1e6);
      gr.Number("tflops_bf16", &g.tflops_bf16, 1e-6, 1e9);
      gr.Number("intra_node_gbps", &g.intra_node_gbps, 1e-6, 1e9);
      gr.Number("inter_node_gbps", &g.inter_node_gbps, 1e-6, 1e9);
      gr.Number("mfu", &g.mfu, 0.01, 1.0);
      gr.Int("nodes", &g.nodes, 1, 100000);
      gr.Int("gpus_per_node", &g.gpus_per_node, 1, 1024);
      if (gr.String("partition", &g.partition) && !g.partition.empty() && !IsSbatchValue(g.partition, "")) {
        d.Error(gr.PosOfKey("partition"), fmt::format("partition '{}' cannot go on an #SBATCH line", g.partition));
      }
      if (gr.String("constraint", &g.constraint) && !g.constraint.empty() && !IsSbatchValue(g.constraint, "&|[]*!()")) {
        d.Error(gr.PosOfKey("constraint"),
                fmt::format("constraint '{}' may hold only letters, digits and _.,:/=+@%-&|[]*!()", g.constraint));
      }
      gr.Finish();
      c.gpu_types.push_back(std::move(g));
    }
  }
  r.Finish();
}

void ReadData(Diagnostics& d, const toml::table& t, DataSpec& data) {
  TableReader r(d, t, "[data]");
  data.pos = r.pos();
  if (r.String("manifest", &data.manifest) && !IsSingleLine(data.manifest)) {
    d.Error(r.PosOfKey("manifest"), "data.manifest must be one line");
  }
  if (!r.Int("global_batch", &data.global_batch, 1, 1 << 24) && !t.get("global_batch"))
    r.RequireMissing("global_batch");
  if (!r.Int("seq_len", &data.seq_len, 1, 1 << 24) && !t.get("seq_len")) r.RequireMissing("seq_len");
  int64_t seed = 0;
  if (r.Int("seed", &seed, 0, std::numeric_limits<int64_t>::max())) data.seed = static_cast<uint64_t>(seed);
  if (r.String("dataset", &data.dataset) && !data.dataset.empty() && data.dataset != "fashion_mnist_captions" &&
      data.dataset != "text") {
    d.Error(r.PosOfKey("dataset"),
            fmt::format("data.dataset = '{}' must be \"fashion_mnist_captions\", \"text\" or \"\" (chosen from the "
                        "modalities){}",
                        data.dataset, Suggest(data.dataset, {"fashion_mnist_captions", "text"})));
  }
  if (const toml::node* n = r.Get("modality")) {
    const toml::array* arr = n->as_array();
    if (!arr) {
      d.Error(PosOf(n->source()), "data.modality must be an array of tables: [[data.modality]]");
    } else {
      for (const auto& el : *arr) {
        const toml::table* mt = el.as_table();
        if (!mt) {
          d.Error(PosOf(el.source()), "each [[data.modality]] must be a table");
          continue;
        }
        TableReader mr(d, *mt, "[[data.modality]]");
        plan::ModalityDesc m;
        if (!mr.String("name", &m.name)) {
          if (!mt->get("name")) mr.RequireMissing("name");
        } else if (!IsIdentifier(m.name) || m.name == "always") {
          d.Error(mr.PosOfKey("name"),
                  fmt::format("modality name '{}' must be an identifier other than 'always'", m.name));
        }
        if (!mr.Number("fraction", &m.fraction, 1e-9, 1.0) && !mt->get("fraction")) mr.RequireMissing("fraction");
        mr.Int("tokens", &m.tokens, 0, 1 << 24);
        mr.Finish();
        for (const auto& other : data.modalities) {
          if (other.name == m.name) d.Error(mr.pos(), fmt::format("modality '{}' is declared twice", m.name));
        }
        data.modalities.push_back(m);
        data.modality_pos.push_back(mr.pos());
      }
    }
  }
  r.Finish();
}

const std::vector<std::string>& ShapeKeys(plan::ModelKind kind) {
  static const std::vector<std::string> decoder = {
      "hidden",        "layers",         "heads",     "kv_heads",          "head_dim",       "ffn_hidden",
      "vocab",         "tie_embeddings", "experts",   "experts_per_token", "moe_ffn_hidden", "qkv_bias",
      "attn_out_bias", "mlp_bias",       "mlp_gated", "norm_bias"};
  static const std::vector<std::string> vit = {
      "hidden",     "layers",         "heads",     "ffn_hidden",    "image_size",    "patch_size",
      "channels",   "temporal_patch", "cls_token", "pos_embed",     "patch_bias",    "pre_norm",
      "final_norm", "pooler",         "qkv_bias",  "spatial_merge", "merger_hidden", "out_dim"};
  static const std::vector<std::string> audio = {
      "hidden", "layers", "heads", "ffn_hidden", "mel_bins", "audio_frames", "max_source_positions"};
  static const std::vector<std::string> projector = {"in_dim", "out_dim", "ffn_hidden"};
  switch (kind) {
    case plan::ModelKind::kDecoder: return decoder;
    case plan::ModelKind::kVit: return vit;
    case plan::ModelKind::kAudioEncoder: return audio;
    case plan::ModelKind::kProjector: return projector;
  }
  return decoder;
}

void ReadModel(Diagnostics& d, const std::string& name, const toml::table& t, SourcePos pos,
               const std::string& base_dir, ModelSpec& m) {
  const std::string where = "[models." + name + "]";
  TableReader r(d, t, where);
  m.name = name;
  m.pos = pos;
  std::string hf;
  if (r.String("hf_config", &hf)) {
    const std::string path = JoinPath(base_dir, hf);
    auto desc = ModelFromHfConfigFile(path);
    if (!desc.ok()) {
      d.Error(r.PosOfKey("hf_config"), desc.status().message());
    } else {
      m.desc = *desc;
      m.desc.source = hf;  // as written in the spec: stable across machines
    }
    r.Finish();
    return;
  }
  std::string kind;
  if (!r.String("kind", &kind)) {
    if (!t.get("kind"))
      d.Error(r.pos(), where + " needs 'kind' (decoder, vit, audio_encoder, projector) or 'hf_config'");
    r.Finish();
    return;
  }
  static const std::map<std::string, plan::ModelKind> kinds = {{"decoder", plan::ModelKind::kDecoder},
                                                               {"vit", plan::ModelKind::kVit},
                                                               {"audio_encoder", plan::ModelKind::kAudioEncoder},
                                                               {"projector", plan::ModelKind::kProjector}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) {
    d.Error(r.PosOfKey("kind"), fmt::format("unknown model kind '{}'{}", kind,
                                            Suggest(kind, {"decoder", "vit", "audio_encoder", "projector"})));
    r.Finish();
    return;
  }
  plan::ModelDesc& desc = m.desc;
  desc.kind = it->second;
  desc.source = "builtin";
  const int64_t big = int64_t{1} << 40;
  for (const auto& key : ShapeKeys(desc.kind)) {
    const toml::node* n = t.get(key);
    if (!n) {
      r.Get(key);
      continue;
    }
    if (n->is_boolean()) {
      bool b = false;
      r.Bool(key, &b);
      if (key == "tie_embeddings") {
        desc.tie_embeddings = b;
      } else {
        desc.extra[key] = b ? 1.0 : 0.0;
      }
      continue;
    }
    int64_t v = 0;
    if (!r.Int(key, &v, 0, big)) continue;
    if (key == "hidden")
      desc.hidden = v;
    else if (key == "layers")
      desc.layers = v;
    else if (key == "heads")
      desc.heads = v;
    else if (key == "kv_heads")
      desc.kv_heads = v;
    else if (key == "head_dim")
      desc.head_dim = v;
    else if (key == "ffn_hidden")
      desc.ffn_hidden = v;
    else if (key == "vocab")
      desc.vocab = v;
    else if (key == "experts")
      desc.experts = v;
    else if (key == "experts_per_token")
      desc.experts_per_token = v;
    else if (key == "moe_ffn_hidden")
      desc.moe_ffn_hidden = v;
    else if (key == "image_size")
      desc.image_size = v;
    else if (key == "patch_size")
      desc.patch_size = v;
    else if (key == "channels")
      desc.channels = v;
    else if (key == "mel_bins")
      desc.mel_bins = v;
    else if (key == "audio_frames")
      desc.audio_frames = v;
    else if (key == "in_dim")
      desc.in_dim = v;
    else if (key == "out_dim")
      desc.out_dim = v;
    else
      desc.extra[key] = static_cast<double>(v);
  }
  r.Get("kind");
  if (desc.kind == plan::ModelKind::kDecoder && desc.kv_heads == 0) desc.kv_heads = desc.heads;
  if (desc.kind == plan::ModelKind::kVit && desc.channels == 0) desc.channels = 3;
  if (desc.kind != plan::ModelKind::kDecoder && desc.kind != plan::ModelKind::kProjector) desc.kv_heads = desc.heads;
  r.Finish();
  if (d.ok()) {
    Status s = CheckModelShape(desc, where);
    if (!s.ok()) d.Error(pos, s.message());
  }
}

void ReadOptimizer(Diagnostics& d, const toml::table& t, const std::string& where, plan::OptimizerDesc& o) {
  TableReader r(d, t, where);
  if (r.String("kind", &o.kind) && o.kind != "adamw" && o.kind != "sgd") {
    d.Error(r.PosOfKey("kind"), fmt::format("optimizer kind '{}' is not supported (adamw, sgd){}", o.kind,
                                            Suggest(o.kind, {"adamw", "sgd"})));
  }
  r.Number("lr", &o.lr, 0, 10);
  r.Number("weight_decay", &o.weight_decay, 0, 10);
  r.Number("beta1", &o.beta1, 0, 1);
  r.Number("beta2", &o.beta2, 0, 1);
  r.Number("grad_clip", &o.grad_clip, 0, 1e9);
  r.Int("warmup_steps", &o.warmup_steps, 0, int64_t{1} << 40);
  if (r.String("schedule", &o.schedule) && o.schedule != "cosine" && o.schedule != "constant") {
    d.Error(r.PosOfKey("schedule"), fmt::format("schedule '{}' must be cosine or constant{}", o.schedule,
                                                Suggest(o.schedule, {"cosine", "constant"})));
  }
  r.Finish();
}

void ReadLoss(Diagnostics& d, const toml::table& t, const std::string& where, plan::LossDesc& loss) {
  TableReader r(d, t, where + " loss");
  if (r.String("kind", &loss.kind) && loss.kind != "lm" && loss.kind != "kd") {
    d.Error(r.PosOfKey("kind"), fmt::format("{}: loss kind '{}' must be lm (next-token cross-entropy) or kd "
                                            "(distillation from a teacher's hidden states){}",
                                            where, loss.kind, Suggest(loss.kind, {"lm", "kd"})));
  }
  r.Number("alpha", &loss.kd_alpha, 0.0, 1.0);
  r.Number("temperature", &loss.temperature, 1e-3, 1e3);
  int64_t top_k = 0;
  if (r.Int("top_k", &top_k, 0, int64_t{1} << 22)) loss.top_k = static_cast<int>(top_k);
  if (loss.kind == "lm") {
    for (const char* key : {"alpha", "temperature", "top_k"}) {
      if (t.get(key)) {
        d.Error(r.PosOfKey(key), fmt::format("{}: loss.{} applies to kind = \"kd\" only; remove it or set "
                                             "kind = \"kd\"",
                                             where, key));
      }
    }
  }
  r.Finish();
}

void ReadSection(Diagnostics& d, const toml::table& t, SectionSpec& s, std::vector<EdgeSpec>& edges,
                 const std::string& base_dir) {
  TableReader r(d, t, "[[section]]");
  s.pos = r.pos();
  if (!r.String("name", &s.name)) {
    if (!t.get("name")) r.RequireMissing("name");
  } else if (!IsIdentifier(s.name)) {
    d.Error(r.PosOfKey("name"), fmt::format("section name '{}' must be 1-64 letters, digits, '_' or '-'", s.name));
  }
  const std::string where = s.name.empty() ? "[[section]]" : "section '" + s.name + "'";
  if (!r.String("model", &s.model) && !t.get("model")) r.RequireMissing("model");
  s.model_pos = r.PosOfKey("model");
  std::string mode;
  if (r.String("mode", &mode)) {
    if (mode == "train") {
      s.mode = plan::SectionMode::kTrain;
    } else if (mode == "forward") {
      s.mode = plan::SectionMode::kForward;
    } else {
      d.Error(r.PosOfKey("mode"), fmt::format("{}: mode '{}' must be train or forward{}", where, mode,
                                              Suggest(mode, {"train", "forward"})));
    }
  }
  r.String("activation", &s.activation);
  s.activation_pos = r.PosOfKey("activation");
  r.Int("tokens", &s.tokens, 1, 1 << 24);
  r.Int("tp", &s.tp, 1, 1024);
  r.Int("pp", &s.pp, 1, 1024);
  r.Int("cp", &s.cp, 1, 1024);
  r.Int("dp", &s.dp, 1, 1 << 20);
  r.Int("micro_batch", &s.micro_batch, 1, 1 << 16);
  bool rc = false;
  if (r.Bool("recompute", &rc)) s.recompute = rc;
  r.String("gpu_type", &s.gpu_type);
  s.gpu_type_pos = r.PosOfKey("gpu_type");
  if (const toml::table* o = r.Table("optimizer")) ReadOptimizer(d, *o, where + " optimizer", s.optimizer);
  std::string init;
  if (r.String("init", &init)) {
    if (init.empty() || !IsSingleLine(init)) {
      d.Error(r.PosOfKey("init"), fmt::format("{}: init must be the path of a .mckpt checkpoint or of a run "
                                              "directory, on one line",
                                              where));
    } else {
      s.init_from = JoinPath(base_dir, init);  // may not exist yet: an earlier run writes it
    }
  }
  if (r.String("init_section", &s.init_section)) {
    if (!IsIdentifier(s.init_section)) {
      d.Error(r.PosOfKey("init_section"),
              fmt::format("{}: init_section '{}' must be a section name (letters, digits, '_' or '-')", where,
                          s.init_section));
    } else if (!t.get("init")) {
      d.Error(r.PosOfKey("init_section"),
              fmt::format("{}: init_section names a section of the checkpoint in 'init'; add init = \"<run dir "
                          "or .mckpt>\"",
                          where));
    }
  }
  if (const toml::table* l = r.Table("loss")) {
    s.has_loss = true;
    s.loss_pos = r.PosOfKey("loss");
    ReadLoss(d, *l, where, s.loss);
  }
  std::vector<std::string> inputs;
  std::vector<SourcePos> input_pos;
  if (r.StringList("inputs", &inputs, &input_pos)) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      EdgeSpec e;
      const auto dot = inputs[i].find('.');
      e.from = inputs[i].substr(0, dot);
      e.tensor = dot == std::string::npos ? e.from + "_out" : inputs[i].substr(dot + 1);
      e.to = s.name;
      e.pos = e.from_pos = input_pos[i];
      e.to_pos = s.pos;
      edges.push_back(e);
    }
  }
  r.Finish();
}

void ReadEdge(Diagnostics& d, const toml::table& t, EdgeSpec& e) {
  TableReader r(d, t, "[[edge]]");
  e.pos = r.pos();
  if (!r.String("from", &e.from) && !t.get("from")) r.RequireMissing("from");
  if (!r.String("to", &e.to) && !t.get("to")) r.RequireMissing("to");
  e.from_pos = r.PosOfKey("from");
  e.to_pos = r.PosOfKey("to");
  if (!r.String("tensor", &e.tensor)) e.tensor = e.from + "_out";
  r.Int("fanout", &e.fanout, 1, 1 << 20);
  r.Int("fanin", &e.fanin, 1, 1 << 20);
  r.Int("bytes_per_sample", &e.bytes_per_sample, 1, int64_t{1} << 40);
  if (e.fanout && e.fanin) d.Error(r.PosOfKey("fanin"), "an edge pins fanout or fanin, not both");
  r.Finish();
}

void ReadProfile(Diagnostics& d, const toml::table& t, ProfileSpec& p) {
  TableReader r(d, t, "[[profile]]");
  p.pos = r.pos();
  if (!r.String("section", &p.section) && !t.get("section")) r.RequireMissing("section");
  r.Int("gpus", &p.gpus, 1, 1 << 20);
  r.Int("micro_batch", &p.micro_batch, 1, 1 << 16);
  if (!r.Number("seconds", &p.seconds, 1e-9, 1e9) && !t.get("seconds")) r.RequireMissing("seconds");
  r.Number("forward_seconds", &p.forward_seconds, 1e-9, 1e9);
  r.Number("optimizer_seconds", &p.optimizer_seconds, 0.0, 1e9);
  if (p.forward_seconds > p.seconds) {
    d.Error(r.PosOfKey("forward_seconds"), "forward_seconds is part of seconds (forward + backward): at most seconds");
  }
  r.Finish();
}

// ---- whole-spec checks --------------------------------------------------------

// A section's `loss`: only a training sink computes one; kd reads a frozen
// decoder's final hidden states (tensor "teacher_hidden") and applies the
// teacher's output head, so teacher and student share the vocabulary.
// REQUIRES: every edge names existing sections.
void CheckLoss(Diagnostics& d, const Spec& spec, const SectionSpec& s) {
  const std::string where = "section '" + s.name + "'";
  if (s.mode != plan::SectionMode::kTrain) {
    d.Error(s.loss_pos, fmt::format("{}: a frozen section (mode = \"forward\") computes no loss; remove loss or "
                                    "make it mode = \"train\"",
                                    where));
    return;
  }
  for (const auto& e : spec.edges) {
    if (e.from == s.name) {
      d.Error(s.loss_pos, fmt::format("{}: only a sink section computes a loss, and this one feeds '{}'", where, e.to));
      return;
    }
  }
  if (s.loss.kind != "kd") return;
  const ModelSpec* student = spec.FindModel(s.model);
  if (student && student->desc.kind != plan::ModelKind::kDecoder) {
    d.Error(s.loss_pos, fmt::format("{}: loss kind = \"kd\" needs a decoder student (its model '{}' is a {})", where,
                                    s.model, plan::ModelKindName(student->desc.kind)));
    return;
  }
  bool found = false;
  std::string inputs;
  for (const auto& e : spec.edges) {
    if (e.to != s.name) continue;
    inputs += (inputs.empty() ? "" : ", ") + e.from + "." + e.tensor;
    const SectionSpec& up = spec.sections[static_cast<size_t>(spec.section_index(e.from))];
    const ModelSpec* teacher = spec.FindModel(up.model);
    if (up.mode != plan::SectionMode::kForward || !teacher || teacher->desc.kind != plan::ModelKind::kDecoder) continue;
    found = true;
    if (e.tensor != "teacher_hidden") {
      d.Error(e.pos, fmt::format("edge {} -> {} carries '{}', but the kd loss of '{}' reads the teacher's final hidden "
                                 "states: name the tensor \"teacher_hidden\" (inputs = [\"{}.teacher_hidden\"] or "
                                 "tensor = \"teacher_hidden\")",
                                 e.from, e.to, e.tensor, s.name, e.from));
    }
    if (student && teacher->desc.vocab != student->desc.vocab) {
      d.Error(s.loss_pos, fmt::format("{}: loss kind = \"kd\" compares token distributions, but the teacher '{}' has "
                                      "vocab {} and the student vocab {}; they must be equal",
                                      where, e.from, teacher->desc.vocab, student->desc.vocab));
    }
  }
  if (!found) {
    d.Error(s.loss_pos,
            fmt::format("{}: loss kind = \"kd\" needs an input edge from a frozen (mode = \"forward\") decoder "
                        "section that sends its hidden states (tensor \"teacher_hidden\"); its inputs are {}",
                        where, inputs.empty() ? "none" : inputs));
  }
}

void CheckGraph(Diagnostics& d, Spec& spec) {
  std::vector<std::string> names;
  for (const auto& s : spec.sections) names.push_back(s.name);
  std::vector<std::string> model_names;
  for (const auto& m : spec.models) model_names.push_back(m.name);
  std::vector<std::string> modality_names = {"always"};
  for (const auto& m : spec.data.modalities) modality_names.push_back(m.name);
  std::vector<std::string> gpu_names;
  for (const auto& g : spec.cluster.gpu_types) gpu_names.push_back(g.name);

  if (spec.sections.empty()) d.Error({}, "the spec declares no [[section]]");
  if (spec.cluster.gpu_types.empty()) {
    d.Error(spec.cluster.pos, "declare at least one GPU type, e.g. [cluster.gpu.h100] with memory_gb and tflops_bf16");
  }
  if (!spec.cluster.default_gpu.empty() && !spec.cluster.Find(spec.cluster.default_gpu)) {
    d.Error(spec.cluster.pos, fmt::format("cluster.default_gpu '{}' is not a declared GPU type{}",
                                          spec.cluster.default_gpu, Suggest(spec.cluster.default_gpu, gpu_names)));
  }
  for (size_t i = 0; i < spec.sections.size(); ++i) {
    const SectionSpec& s = spec.sections[i];
    for (size_t j = 0; j < i; ++j) {
      if (spec.sections[j].name == s.name && !s.name.empty()) {
        d.Error(s.pos,
                fmt::format("section '{}' is declared twice (first at line {})", s.name, spec.sections[j].pos.line));
      }
    }
    if (!s.model.empty() && !spec.FindModel(s.model)) {
      d.Error(s.model_pos,
              fmt::format("section '{}': unknown model '{}'{}", s.name, s.model, Suggest(s.model, model_names)));
    }
    if (std::find(modality_names.begin(), modality_names.end(), s.activation) == modality_names.end()) {
      d.Error(s.activation_pos,
              fmt::format("section '{}': activation '{}' is neither 'always' nor a [[data.modality]]{}", s.name,
                          s.activation, Suggest(s.activation, modality_names)));
    }
    if (!s.gpu_type.empty() && !spec.cluster.Find(s.gpu_type)) {
      d.Error(s.gpu_type_pos,
              fmt::format("section '{}': unknown gpu_type '{}'{}", s.name, s.gpu_type, Suggest(s.gpu_type, gpu_names)));
    }
  }
  for (const auto& p : spec.profiles) {
    if (spec.section_index(p.section) < 0) {
      d.Error(p.pos, fmt::format("profile of unknown section '{}'{}", p.section, Suggest(p.section, names)));
    }
  }
  bool edges_ok = true;
  for (const auto& e : spec.edges) {
    const int u = spec.section_index(e.from), v = spec.section_index(e.to);
    if (u < 0) {
      d.Error(e.from_pos,
              fmt::format("edge {} -> {}: unknown section '{}'{}", e.from, e.to, e.from, Suggest(e.from, names)));
      edges_ok = false;
    }
    if (v < 0) {
      d.Error(e.to_pos, fmt::format("edge {} -> {}: unknown section '{}'{}", e.from, e.to, e.to, Suggest(e.to, names)));
      edges_ok = false;
    }
    if (u < 0 || v < 0) {
      edges_ok = false;
      continue;
    }
    if (u == v) {
      d.Error(e.pos, fmt::format("edge {} -> {}: a section cannot feed itself", e.from, e.to));
      edges_ok = false;
    }
    const SectionSpec& su = spec.sections[static_cast<size_t>(u)];
    const SectionSpec& sv = spec.sections[static_cast<size_t>(v)];
    if (su.dp && sv.dp) {
      const bool ok = e.fanout  ? sv.dp == su.dp * e.fanout
                      : e.fanin ? su.dp == sv.dp * e.fanin
                                : (sv.dp % su.dp == 0 || su.dp % sv.dp == 0);
      if (!ok) {
        d.Error(e.pos, fmt::format("the fan-out on edge {} -> {} is impossible: pinned dp {} and {}{} break "
                                   "DP_from * fanout = DP_to (fan-in likewise)",
                                   e.from, e.to, su.dp, sv.dp,
                                   e.fanout  ? fmt::format(" with fanout = {}", e.fanout)
                                   : e.fanin ? fmt::format(" with fanin = {}", e.fanin)
                                             : ""));
      }
    }
  }
  if (!edges_ok) return;
  for (const SectionSpec& s : spec.sections) {
    if (s.has_loss) CheckLoss(d, spec, s);
  }
  // Cycles: depth-first search; report the cycle's path at its closing edge.
  const size_t n = spec.sections.size();
  std::vector<std::vector<size_t>> out(n);
  for (size_t e = 0; e < spec.edges.size(); ++e) {
    out[static_cast<size_t>(spec.section_index(spec.edges[e].from))].push_back(e);
  }
  std::vector<int> state(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<size_t> stack;
  bool reported = false;
  std::function<void(size_t)> visit = [&](size_t v) {
    state[v] = 1;
    stack.push_back(v);
    for (size_t e : out[v]) {
      const size_t w = static_cast<size_t>(spec.section_index(spec.edges[e].to));
      if (state[w] == 1 && !reported) {
        std::string path;
        auto it = std::find(stack.begin(), stack.end(), w);
        for (; it != stack.end(); ++it) path += spec.sections[*it].name + " -> ";
        path += spec.sections[w].name;
        d.Error(spec.edges[e].pos, fmt::format("the section graph has a cycle: {}; sections must form a DAG", path));
        reported = true;
      } else if (state[w] == 0) {
        visit(w);
      }
    }
    stack.pop_back();
    state[v] = 2;
  };
  for (size_t v = 0; v < n && !reported; ++v) {
    if (state[v] == 0) visit(v);
  }
}

}  // namespace

const GpuTypeSpec* ClusterSpec::Find(const std::string& name) const {
  for (const auto& g : gpu_types) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

int Spec::section_index(const std::string& name) const {
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ModelSpec* Spec::FindModel(const std::string& name) const {
  for (const auto& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string AtPos(const std::string& path, SourcePos pos, const std::string& message) {
  if (pos.line <= 0) return fmt::format("{}: {}", path, message);
  return fmt::format("{}:{}:{}: {}", path, pos.line, pos.column, message);
}

int EditDistance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insertions, deletions, substitutions and
  // transpositions of neighbours ("nmae" -> "name") cost 1.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string Suggest(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 256) return "";
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const auto& c : candidates) {
    const int dist = EditDistance(word, c);
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  const int limit = word.size() <= 4 ? 1 : (word.size() <= 8 ? 2 : 3);
  if (best.empty() || best_d == 0 || best_d > limit) return "";
  return fmt::format(" (did you mean '{}'?)", best);
}

StatusOr<Spec> ParseSpecString(const std::string& text, const std::string& path, const std::string& base_dir) {
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
  if (const toml::table* t = top.Table("job")) ReadJob(d, *t, spec.job);
  if (const toml::table* t = top.Table("cluster")) {
    ReadCluster(d, *t, spec.cluster);
  } else if (!root.get("cluster")) {
    d.Error({}, "the spec needs a [cluster] table (nodes, gpus_per_node, [cluster.gpu.<type>])");
  }
  if (const toml::table* t = top.Table("data")) {
    ReadData(d, *t, spec.data);
  } else if (!root.get("data")) {
    d.Error({}, "the spec needs a [data] table (global_batch, seq_len)");
  }
  if (const toml::table* models = top.Table("models")) {
    for (const auto& [k, v] : *models) {
      ModelSpec m;
      if (const toml::table* mt = v.as_table()) {
        ReadModel(d, std::string(k.str()), *mt, PosOf(k.source()), base_dir, m);
        spec.models.push_back(std::move(m));
      } else {
        d.Error(PosOf(v.source()), fmt::format("[models.{}] must be a table", std::string(k.str())));
      }
    }
  }
  auto each_table = [&](const char* key, const std::function<void(const toml::table&)>& fn) {
    const toml::node* n = top.Get(key);
    if (!n) return;
    const toml::array* arr = n->as_array();
    if (!arr) {
      d.Error(PosOf(n->source()), fmt::format("'{}' must be an array of tables: write [[{}]]", key, key));
      return;
    }
    for (const auto& el : *arr) {
      if (const toml::table* t = el.as_table()) {
        fn(*t);
      } else {
        d.Error(PosOf(el.source()), fmt::format("each [[{}]] must be a table", key));
      }
    }
  };
  each_table("section", [&](const toml::table& t) {
    SectionSpec s;
    ReadSection(d, t, s, spec.edges, base_dir);
    spec.sections.push_back(std::move(s));
  });
  each_table("edge", [&](const toml::table& t) {
    EdgeSpec e;
    ReadEdge(d, t, e);
    spec.edges.push_back(std::move(e));
  });
  each_table("profile", [&](const toml::table& t) {
    ProfileSpec p;
    ReadProfile(d, t, p);
    spec.profiles.push_back(std::move(p));
  });
  top.Finish();
  // Cluster defaults flow into the GPU types.
  for (auto& g : spec.cluster.gpu_types) {
    if (g.nodes == 0) g.nodes = spec.cluster.nodes;
    if (g.gpus_per_node == 0) g.gpus_per_node = spec.cluster.gpus_per_node;
  }
  if (spec.cluster.default_gpu.empty() && !spec.cluster.gpu_types.empty()) {
    spec.cluster.default_gpu = spec.cluster.gpu_types.front().name;
  }
  if (d.ok()) CheckGraph(d, spec);
  if (!d.ok()) return d.ToStatus();
  return spec;
}

StatusOr<Spec> ParseSpecFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open the spec file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string base_dir = ".";
  const auto slash = path.rfind('/');
  if (slash != std::string::npos) base_dir = slash == 0 ? "/" : path.substr(0, slash);
  return ParseSpecString(ss.str(), path, base_dir);
}

}  // namespace maestro::compiler
