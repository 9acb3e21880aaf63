// SPDX-License-Identifier: Apache-2.0
#include "compiler/toml_reader.h"

#include <fmt/format.h>

#include <algorithm>

namespace maestro::compiler {

namespace internal {

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

void Diagnostics::Error(SourcePos pos, const std::string& message) {
  if (errors_.size() < kMaxErrors) errors_.push_back(AtPos(path_, pos, message));
}

Status Diagnostics::ToStatus() const {
  std::string all;
  for (const auto& e : errors_) all += (all.empty() ? "" : "\n") + e;
  return Status::InvalidArgument(all);
}

TableReader::TableReader(Diagnostics& d, const toml::table& t, std::string where)
    : d_(d), t_(t), where_(std::move(where)) {
  for (char c : where_) {
    if (c != '[' && c != ']') prefix_ += c;
  }
}

const toml::node* TableReader::Get(const std::string& key) {
  known_.push_back(key);
  return t_.get(key);
}

SourcePos TableReader::PosOfKey(const std::string& key) const {
  const toml::node* n = t_.get(key);
  return n ? PosOf(n->source()) : PosOf(t_.source());
}

template <typename T>
const toml::value<T>* TableReader::Typed(const std::string& key, const char* want) {
  const toml::node* n = Get(key);
  if (!n) return nullptr;
  if (const toml::value<T>* v = n->as<T>()) return v;
  TypeError(key, *n, want);
  return nullptr;
}

bool TableReader::String(const std::string& key, std::string* out) {
  const toml::value<std::string>* v = Typed<std::string>(key, "a string");
  if (!v) return false;
  *out = v->get();
  return true;
}

bool TableReader::Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi) {
  const toml::value<int64_t>* v = Typed<int64_t>(key, "an integer");
  if (!v) return false;
  if (v->get() < lo || v->get() > hi) {
    d_.Error(PosOf(v->source()),
             fmt::format("{}.{} = {} is out of range; it must be in [{}, {}]", prefix_, key, v->get(), lo, hi));
    return false;
  }
  *out = v->get();
  return true;
}

bool TableReader::Int(const std::string& key, int* out, int lo, int hi) {
  int64_t x = 0;
  if (!Int(key, &x, static_cast<int64_t>(lo), static_cast<int64_t>(hi))) return false;
  *out = static_cast<int>(x);
  return true;
}

bool TableReader::Number(const std::string& key, double* out, double lo, double hi) {
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

bool TableReader::Bool(const std::string& key, bool* out) {
  const toml::value<bool>* v = Typed<bool>(key, "a boolean (true or false)");
  if (!v) return false;
  *out = v->get();
  return true;
}

bool TableReader::StringList(const std::string& key, std::vector<std::string>* out, std::vector<SourcePos>* pos) {
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

const toml::table* TableReader::Table(const std::string& key) {
  const toml::node* n = Get(key);
  if (!n) return nullptr;
  if (auto* t = n->as_table()) return t;
  TypeError(key, *n, "a table");
  return nullptr;
}

void TableReader::RequireMissing(const std::string& key) {
  d_.Error(pos(), fmt::format("{} needs the key '{}'", where_, key));
}

void TableReader::Finish() {
  for (const auto& [k, v] : t_) {
    const std::string key(k.str());
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    d_.Error(PosOf(k.source()), fmt::format("unknown key '{}' in {}{}", key, where_, Suggest(key, known_)));
  }
}

void TableReader::TypeError(const std::string& key, const toml::node& n, const char* want) {
  d_.Error(PosOf(n.source()), fmt::format("{}.{} must be {}, not {}", prefix_, key, want, TypeName(n.type())));
}

}  // namespace internal

}  // namespace maestro::compiler
