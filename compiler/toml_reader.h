// SPDX-License-Identifier: Apache-2.0
// The generic TOML reader under the spec: one parse's error list and a
// reader of one TOML table that checks each value's type and range and
// reports the keys nobody asked for (with a "did you mean" suggestion).
//
// Owns: the wording of type, range and unknown-key messages
// ("job.time must be a string, not an integer", "unknown key 'nmae' in
// [[section]] (did you mean 'name'?)") and the cap of 20 messages; each
// message is located by AtPos and suggests through Suggest
// (compiler/spec_types.h).
// Knows no key of the spec: compiler/spec_tables.cc says which keys exist.
// May call: base, compiler/spec_types.h, TOML++, fmt. Internal to maestro_compiler (includes TOML++,
// a private dependency): include it only from compiler/*.cc.
// Thread safety: a Diagnostics and its TableReaders belong to one parse
// (one thread); the free functions are pure.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/spec_types.h"

namespace maestro::compiler::internal {

// Where a TOML node starts, 1-based.
SourcePos PosOf(const toml::source_region& r);
// "a string", "an integer", ... for type messages.
const char* TypeName(toml::node_type t);

// Shared error list of one parse: "file:line:col: message" lines, the first
// kMaxErrors kept.
class Diagnostics {
 public:
  static constexpr size_t kMaxErrors = 20;

  explicit Diagnostics(std::string path) : path_(std::move(path)) {}
  void Error(SourcePos pos, const std::string& message);
  bool ok() const { return errors_.empty(); }
  // InvalidArgument with one line per error.
  Status ToStatus() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> errors_;
};

// Reads the keys of one TOML table, remembers which were read, and reports
// the rest as unknown (with a suggestion among the keys read, in the order
// they were asked for). A typed read returns true when the key is present
// with a valid value (stored in *out); a present but invalid value is
// reported and returns false, as does an absent key (silently).
class TableReader {
 public:
  // `where` names the table in messages: "[job]", "[[section]]".
  TableReader(Diagnostics& d, const toml::table& t, std::string where);

  // The key's node (nullptr when absent); marks the key as known.
  const toml::node* Get(const std::string& key);
  // The key's position, or the table's when the key is absent.
  SourcePos PosOfKey(const std::string& key) const;
  SourcePos pos() const { return PosOf(t_.source()); }

  bool String(const std::string& key, std::string* out);
  bool Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi);
  bool Int(const std::string& key, int* out, int lo, int hi);
  bool Number(const std::string& key, double* out, double lo, double hi);  // an integer is accepted too
  bool Bool(const std::string& key, bool* out);
  // Appends the array's strings and their positions; a non-string element
  // is reported and skipped.
  bool StringList(const std::string& key, std::vector<std::string>* out, std::vector<SourcePos>* pos);
  const toml::table* Table(const std::string& key);
  // "<where> needs the key '<key>'" at the table.
  void RequireMissing(const std::string& key);
  // Reports keys that no Get() asked for.
  void Finish();

 private:
  // The key's value node when it has type T; reports "must be <want>" when
  // it has another type.
  template <typename T>
  const toml::value<T>* Typed(const std::string& key, const char* want);
  void TypeError(const std::string& key, const toml::node& n, const char* want);

  Diagnostics& d_;
  const toml::table& t_;
  std::string where_;   // "[job]": names the table
  std::string prefix_;  // "job": prefixes a key in value messages ("job.time")
  std::vector<std::string> known_;
};

}  // namespace maestro::compiler::internal
