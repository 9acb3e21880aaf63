// SPDX-License-Identifier: Apache-2.0
#include "datalayer/sample_index.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/checks.h"
#include "base/splitmix.h"
#include "datalayer/manifest_line.h"

namespace maestro::datalayer {
namespace {

// A meta value written by us as a decimal number; nullopt when it is not one.
std::optional<uint64_t> ParseU64(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

bool ValidModalityName(const std::string& name) {
  if (name.empty() || name.size() > 32 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS modalities(
  modality_id INTEGER PRIMARY KEY,            -- bit in samples.modality_mask
  name TEXT NOT NULL UNIQUE);                 -- column samples.tokens_<name>
CREATE TABLE IF NOT EXISTS samples(
  sample_id INTEGER PRIMARY KEY,
  location TEXT NOT NULL,
  modality_mask INTEGER NOT NULL,
  tokens_total INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS steps(
  step INTEGER PRIMARY KEY,
  epoch INTEGER NOT NULL,
  step_in_epoch INTEGER NOT NULL,
  sample_ids TEXT NOT NULL,                   -- JSON array, batch order
  schedule TEXT NOT NULL,                     -- JSON, as the scheduler gave it
  checkpoint_step INTEGER NOT NULL REFERENCES checkpoints(checkpoint_step));
CREATE TABLE IF NOT EXISTS consumed(
  epoch INTEGER NOT NULL,
  sample_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  PRIMARY KEY(epoch, sample_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints(
  checkpoint_step INTEGER PRIMARY KEY,
  file TEXT NOT NULL,
  committed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));
CREATE TABLE IF NOT EXISTS spools(
  spool TEXT PRIMARY KEY,
  file TEXT NOT NULL,
  dtype TEXT NOT NULL,
  committed_values INTEGER NOT NULL,          -- values in use in the file
  committed_rows INTEGER NOT NULL);           -- rows in /rows in use
CREATE TABLE IF NOT EXISTS spool_rows(
  spool TEXT NOT NULL REFERENCES spools(spool),
  sample_id INTEGER NOT NULL,
  epoch INTEGER NOT NULL,                     -- epoch that computed it
  value_offset INTEGER NOT NULL,
  value_count INTEGER NOT NULL,
  dims TEXT NOT NULL,                         -- JSON array
  crc32c INTEGER NOT NULL,
  PRIMARY KEY(spool, sample_id)) WITHOUT ROWID;
)sql";

}  // namespace

StatusOr<std::unique_ptr<SampleIndex>> SampleIndex::Open(const std::string& path, Env* env) {
  MAESTRO_ASSIGN_OR_RETURN(auto db, SqliteDb::Open(path));
  std::unique_ptr<SampleIndex> index(new SampleIndex(std::move(db), env));
  MAESTRO_RETURN_IF_ERROR(index->CreateOrCheckSchema());
  MAESTRO_RETURN_IF_ERROR(index->LoadSamples());
  return index;
}

StatusOr<std::unique_ptr<SampleIndex>> SampleIndex::OpenForCommits(const std::string& path, int64_t steps_per_epoch,
                                                                   Env* env) {
  if (steps_per_epoch <= 0) return Status::InvalidArgument("SampleIndex::OpenForCommits before ConfigureRun");
  MAESTRO_ASSIGN_OR_RETURN(auto db, SqliteDb::Open(path));
  std::unique_ptr<SampleIndex> index(new SampleIndex(std::move(db), env));
  MAESTRO_RETURN_IF_ERROR(index->CreateOrCheckSchema());
  index->commit_steps_per_epoch_ = steps_per_epoch;
  return index;
}

Status SampleIndex::CreateOrCheckSchema() {
  // meta may not exist yet: probe sqlite_master first.
  MAESTRO_ASSIGN_OR_RETURN(auto probe, db_->Prepare("SELECT count(*) FROM sqlite_master WHERE name='meta'"));
  MAESTRO_ASSIGN_OR_RETURN(bool row, probe.Step());
  const bool has_meta = row && probe.Int(0) > 0;
  if (has_meta) {
    MAESTRO_ASSIGN_OR_RETURN(auto version, GetMeta("schema_version"));
    const std::string want = std::to_string(kIndexSchemaVersion);
    if (!version || *version != want) {
      return Status::FailedPrecondition(
          fmt::format("{}: sample index schema version {} but this Maestro reads version {}; "
                      "re-ingest the manifest into a new index, or use the Maestro release that wrote it",
                      db_->path(), version ? *version : "(none)", want));
    }
    return Status::Ok();
  }
  MAESTRO_RETURN_IF_ERROR(db_->Begin());
  Status s = db_->Exec(kSchema);
  if (s.ok()) s = SetMeta("schema_version", std::to_string(kIndexSchemaVersion));
  if (s.ok()) s = db_->Commit();
  if (!s.ok()) db_->RollbackQuietly();
  return s;
}

StatusOr<std::optional<std::string>> SampleIndex::GetMeta(const std::string& key) {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT value FROM meta WHERE key=?"));
  stmt.Bind(1, key);
  MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(stmt.Text(0));
}

Status SampleIndex::SetMeta(const std::string& key, const std::string& value) {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)"));
  stmt.Bind(1, key);
  stmt.Bind(2, value);
  return stmt.Run();
}

Status SampleIndex::LoadSamples() {
  sample_ids_.clear();
  modalities_.clear();
  permutation_cache_.clear();
  {
    MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT sample_id FROM samples ORDER BY sample_id"));
    for (;;) {
      MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      sample_ids_.push_back(stmt.Int(0));
    }
  }
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT name FROM modalities ORDER BY modality_id"));
  for (;;) {
    MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    modalities_.push_back(stmt.Text(0));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto seed, GetMeta("seed"));
  MAESTRO_ASSIGN_OR_RETURN(auto batch, GetMeta("global_batch_size"));
  if (seed && batch) {
    const auto seed_value = ParseU64(*seed);
    const auto batch_value = ParseU64(*batch);
    if (!seed_value || !batch_value) {
      return Status::Corruption(
          fmt::format("{}: meta seed '{}' / global_batch_size '{}' are not numbers; "
                      "the index was edited by hand or is damaged",
                      db_->path(), *seed, *batch));
    }
    seed_ = *seed_value;
    batch_size_ = static_cast<int64_t>(*batch_value);
  }
  return Status::Ok();
}

namespace {

// A manifest line the fast scanner leaves to nlohmann-json (escapes, floats,
// unknown keys, errors): parsed into *doc, which `line`'s views point into;
// the errors name manifest_path:line_no.
Status ReadManifestLineJson(const char* begin, const char* stop, const std::string& manifest_path, size_t line_no,
                            nlohmann::json* doc, internal::ManifestLine* line) {
  auto where = [&] { return fmt::format("{}:{}", manifest_path, line_no); };
  nlohmann::json& j = *doc;
  j = nlohmann::json::parse(begin, stop, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{}: not a JSON object; each line must look like "
                    "{{\"id\": 17, \"location\": \"shard-3.tar:1234\", \"tokens\": {{\"text\": 412}}}}",
                    where()));
  }
  const auto id = j.find("id");
  const auto location = j.find("location");
  const auto toks = j.find("tokens");
  if (id == j.end() || !id->is_number_integer()) {
    return Status::InvalidArgument(fmt::format("{}: \"id\" must be an integer sample id", where()));
  }
  if (location == j.end() || !location->is_string()) {
    return Status::InvalidArgument(fmt::format("{}: \"location\" must be a string (where the payload is)", where()));
  }
  if (toks == j.end() || !toks->is_object() || toks->empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: \"tokens\" must be a non-empty object of modality -> token count, e.g. {{\"text\": 412}}", where()));
  }
  line->id = id->get<int64_t>();
  line->location = location->get_ref<const std::string&>();
  line->tokens.clear();
  for (auto it = toks->begin(); it != toks->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0) {
      return Status::InvalidArgument(
          fmt::format("{}: token count of modality '{}' must be a non-negative integer", where(), it.key()));
    }
    line->tokens.emplace_back(it.key(), it.value().get<int64_t>());
  }
  return Status::Ok();
}

}  // namespace

Status SampleIndex::PrepareSampleInsert(SqliteStmt* insert) {
  std::string cols = "sample_id, location, modality_mask, tokens_total";
  std::string vals = "?, ?, ?, ?";
  for (const auto& m : modalities_) {
    cols += ", tokens_" + m;
    vals += ", ?";
  }
  MAESTRO_ASSIGN_OR_RETURN(*insert, db_->Prepare(fmt::format("INSERT INTO samples({}) VALUES({})", cols, vals)));
  return Status::Ok();
}

Status SampleIndex::AddModality(const std::string& name) {
  const int id_of_new = static_cast<int>(modalities_.size());
  Status s = db_->Exec(fmt::format("ALTER TABLE samples ADD COLUMN tokens_{} INTEGER NOT NULL DEFAULT 0", name));
  if (s.ok()) s = db_->Exec(fmt::format("INSERT INTO modalities(modality_id, name) VALUES({}, '{}')", id_of_new, name));
  modalities_.push_back(name);
  return s;
}

Status SampleIndex::InsertManifestSamples(const std::string& text, const std::string& manifest_path,
                                          IngestStats* stats) {
  std::map<std::string, int, std::less<>> column_of;  // modality -> index into modalities_
  internal::ManifestLine line;
  for (size_t i = 0; i < modalities_.size(); ++i) column_of[modalities_[i]] = static_cast<int>(i);
  SqliteStmt insert;
  MAESTRO_RETURN_IF_ERROR(PrepareSampleInsert(&insert));

  std::vector<int64_t> tokens(modalities_.size());
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    const char* begin = text.data() + pos;
    const char* stop = text.data() + end;
    pos = end + 1;
    while (begin < stop && (*begin == ' ' || *begin == '\t' || *begin == '\r')) ++begin;
    if (begin == stop) continue;  // blank line
    auto where = [&] { return fmt::format("{}:{}", manifest_path, line_no); };
    nlohmann::json j;  // only for lines the fast scanner leaves to nlohmann
    if (!internal::ScanSimpleManifestLine(begin, stop, line)) {
      MAESTRO_RETURN_IF_ERROR(ReadManifestLineJson(begin, stop, manifest_path, line_no, &j, &line));
    }
    std::fill(tokens.begin(), tokens.end(), 0);
    int64_t mask = 0;
    int64_t total = 0;
    for (const auto& [name_view, n] : line.tokens) {
      auto col = column_of.find(name_view);
      if (col == column_of.end()) {
        const std::string name(name_view);
        if (!ValidModalityName(name)) {
          return Status::InvalidArgument(fmt::format(
              "{}: modality name '{}' must be 1-32 characters of [a-z0-9_], starting with a letter", where(), name));
        }
        if (modalities_.size() >= 62) {
          return Status::InvalidArgument(fmt::format("{}: more than 62 modalities", where()));
        }
        const int id_of_new = static_cast<int>(modalities_.size());
        insert = SqliteStmt();
        Status s = AddModality(name);
        column_of[name] = id_of_new;
        tokens.push_back(0);
        if (s.ok()) s = PrepareSampleInsert(&insert);
        if (!s.ok()) return s;
        col = column_of.find(name_view);
      }
      tokens[static_cast<size_t>(col->second)] = n;
      mask |= int64_t{1} << col->second;
      total += n;
    }
    insert.Bind(1, line.id);
    insert.BindStatic(2, line.location);
    insert.Bind(3, mask);
    insert.Bind(4, total);
    for (size_t m = 0; m < tokens.size(); ++m) insert.Bind(static_cast<int>(5 + m), tokens[m]);
    if (Status s = insert.Run(); !s.ok()) {
      if (s.code() == StatusCode::kFailedPrecondition) {
        return Status::InvalidArgument(
            fmt::format("{}: sample id {} appears twice in the manifest; sample ids must be unique", where(), line.id));
      }
      return s.WithContext(where());
    }
    ++stats->samples;
  }
  return Status::Ok();
}

StatusOr<IngestStats> SampleIndex::IngestManifest(const std::string& manifest_path) {
  struct stat st {};
  if (::stat(manifest_path.c_str(), &st) != 0) {
    return Status::NotFound(fmt::format("manifest {}: no such file", manifest_path));
  }
  const std::string manifest_key = fmt::format("{} ({} bytes)", manifest_path, static_cast<int64_t>(st.st_size));
  MAESTRO_ASSIGN_OR_RETURN(auto previous, GetMeta("manifest"));
  if (previous) {
    if (*previous == manifest_key) {
      IngestStats stats;
      stats.samples = NumSamples();
      stats.modalities = modalities_;
      stats.already_ingested = true;
      return stats;
    }
    return Status::FailedPrecondition(
        fmt::format("{}: this index already holds manifest {}; ingest {} into a new index (one manifest per run)",
                    db_->path(), *previous, manifest_path));
  }
  MAESTRO_ASSIGN_OR_RETURN(std::string text, env_->ReadFile(manifest_path));

  // One big transaction: a page cache large enough that SQLite does not spill
  // dirty pages into the WAL before the commit (64 MiB).
  MAESTRO_RETURN_IF_ERROR(db_->Exec("PRAGMA cache_size=-65536"));
  MAESTRO_RETURN_IF_ERROR(db_->Begin());
  IngestStats stats;
  auto fail = [&](Status s) {
    db_->RollbackQuietly();
    (void)LoadSamples();
    return s;
  };
  if (Status s = InsertManifestSamples(text, manifest_path, &stats); !s.ok()) return fail(s);
  if (stats.samples == 0) {
    return fail(Status::InvalidArgument(fmt::format("manifest {} has no samples", manifest_path)));
  }
  if (Status s = SetMeta("manifest", manifest_key); !s.ok()) return fail(s);
  if (Status s = env_->BeforeDurableOp(DurableOp::kIngestCommit, db_->path()); !s.ok()) return fail(s);
  if (Status s = db_->Commit(); !s.ok()) return fail(s);
  MAESTRO_RETURN_IF_ERROR(LoadSamples());
  stats.modalities = modalities_;
  return stats;
}

Status SampleIndex::ConfigureRun(uint64_t seed, int64_t global_batch_size) {
  if (global_batch_size <= 0) {
    return Status::InvalidArgument(fmt::format("global batch size must be positive, got {}", global_batch_size));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto old_seed, GetMeta("seed"));
  MAESTRO_ASSIGN_OR_RETURN(auto old_batch, GetMeta("global_batch_size"));
  if (old_seed && old_batch) {
    if (ParseU64(*old_seed) != seed || ParseU64(*old_batch) != static_cast<uint64_t>(global_batch_size)) {
      return Status::FailedPrecondition(fmt::format(
          "{}: this run was started with seed {} and global batch size {}, now asked for seed {} and batch {}; "
          "resume with the original values or start a new run directory",
          db_->path(), *old_seed, *old_batch, seed, global_batch_size));
    }
  } else {
    MAESTRO_RETURN_IF_ERROR(db_->Begin());
    Status s = SetMeta("seed", std::to_string(seed));
    if (s.ok()) s = SetMeta("global_batch_size", std::to_string(global_batch_size));
    if (s.ok()) s = db_->Commit();
    if (!s.ok()) {
      db_->RollbackQuietly();
      return s;
    }
  }
  seed_ = seed;
  batch_size_ = global_batch_size;
  return Status::Ok();
}

int64_t SampleIndex::StepsPerEpoch() const {
  if (commit_steps_per_epoch_ > 0) return commit_steps_per_epoch_;
  if (batch_size_ <= 0) return 0;
  return (NumSamples() + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> SampleIndex::EpochPermutation(int64_t epoch) const {
  auto cached = permutation_cache_.find(epoch);
  if (cached != permutation_cache_.end()) return cached->second;
  std::vector<int64_t> ids = sample_ids_;
  uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1));
  for (size_t i = ids.size(); i > 1; --i) {
    const uint64_t j = SplitMix64Next(state) % i;  // modulo bias is irrelevant here
    std::swap(ids[i - 1], ids[j]);
  }
  if (permutation_cache_.size() > 2) permutation_cache_.erase(permutation_cache_.begin());
  permutation_cache_[epoch] = ids;
  return ids;
}

StatusOr<GlobalBatch> SampleIndex::BatchForStep(int64_t step) {
  if (batch_size_ <= 0) {
    return Status::FailedPrecondition("SampleIndex::BatchForStep before ConfigureRun (seed, batch size)");
  }
  if (NumSamples() == 0) {
    return Status::FailedPrecondition(fmt::format("{}: no samples; ingest a manifest first", db_->path()));
  }
  if (step < 0) return Status::InvalidArgument(fmt::format("negative step {}", step));
  GlobalBatch batch;
  batch.step = step;
  batch.epoch = step / StepsPerEpoch();
  batch.step_in_epoch = step % StepsPerEpoch();
  const std::vector<int64_t> perm = EpochPermutation(batch.epoch);
  const auto begin = static_cast<size_t>(batch.step_in_epoch * batch_size_);
  const size_t end = std::min(perm.size(), begin + static_cast<size_t>(batch_size_));
  batch.sample_ids.assign(perm.begin() + static_cast<std::ptrdiff_t>(begin),
                          perm.begin() + static_cast<std::ptrdiff_t>(end));
  return batch;
}

StatusOr<std::vector<SampleInfo>> SampleIndex::GetSamples(const std::vector<int64_t>& sample_ids) {
  std::string cols = "location";
  for (const auto& m : modalities_) cols += ", tokens_" + m;
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare(fmt::format("SELECT {} FROM samples WHERE sample_id=?", cols)));
  std::vector<SampleInfo> out;
  out.reserve(sample_ids.size());
  for (int64_t id : sample_ids) {
    stmt.Bind(1, id);
    MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return Status::NotFound(fmt::format("{}: no sample with id {}", db_->path(), id));
    SampleInfo info;
    info.sample_id = id;
    info.location = stmt.Text(0);
    for (size_t m = 0; m < modalities_.size(); ++m) {
      const int64_t n = stmt.Int(static_cast<int>(1 + m));
      if (n > 0) info.tokens[modalities_[m]] = n;
    }
    stmt.Reset();
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<CommitPoint> SampleIndex::LastCommit() {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt,
                           db_->Prepare("SELECT s.step, s.checkpoint_step, c.file FROM steps s JOIN checkpoints c "
                                        "ON c.checkpoint_step = s.checkpoint_step ORDER BY s.step DESC LIMIT 1"));
  MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
  CommitPoint point;
  if (row) {
    point.last_step = stmt.Int(0);
    point.checkpoint_step = stmt.Int(1);
    point.checkpoint_file = stmt.Text(2);
  }
  return point;
}

Status SampleIndex::CommitSteps(const std::vector<StepRecord>& steps, int64_t checkpoint_step,
                                const std::string& checkpoint_file) {
  if (steps.empty()) return Status::InvalidArgument("CommitSteps with no steps");
  MAESTRO_ASSIGN_OR_RETURN(CommitPoint last, LastCommit());
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].step != last.next_step() + static_cast<int64_t>(i)) {
      return Status::FailedPrecondition(
          fmt::format("{}: step {} committed out of order (the step log ends at step {}); steps commit consecutively",
                      db_->path(), steps[i].step, last.last_step));
    }
  }
  if (checkpoint_step != steps.back().step) {
    return Status::InvalidArgument(fmt::format("checkpoint {} must be the state after the last committed step {}",
                                               checkpoint_step, steps.back().step));
  }
  const int64_t spe = StepsPerEpoch();
  if (spe <= 0) return Status::FailedPrecondition("CommitSteps before ConfigureRun");
  MAESTRO_RETURN_IF_ERROR(db_->Begin());
  auto body = [&]() -> Status {
    MAESTRO_ASSIGN_OR_RETURN(auto ckpt, db_->Prepare("INSERT INTO checkpoints(checkpoint_step, file) VALUES(?, ?)"));
    ckpt.Bind(1, checkpoint_step);
    ckpt.Bind(2, checkpoint_file);
    MAESTRO_RETURN_IF_ERROR(ckpt.Run());
    MAESTRO_ASSIGN_OR_RETURN(auto step_stmt,
                             db_->Prepare("INSERT INTO steps(step, epoch, step_in_epoch, sample_ids, schedule, "
                                          "checkpoint_step) VALUES(?, ?, ?, ?, ?, ?)"));
    MAESTRO_ASSIGN_OR_RETURN(auto consume,
                             db_->Prepare("INSERT INTO consumed(epoch, sample_id, step) VALUES(?, ?, ?)"));
    for (const StepRecord& rec : steps) {
      const int64_t epoch = rec.step / spe;
      step_stmt.Bind(1, rec.step);
      step_stmt.Bind(2, epoch);
      step_stmt.Bind(3, rec.step % spe);
      step_stmt.Bind(4, nlohmann::json(rec.sample_ids).dump());
      step_stmt.Bind(5, rec.schedule_json.empty() ? std::string("{}") : rec.schedule_json);
      step_stmt.Bind(6, checkpoint_step);
      MAESTRO_RETURN_IF_ERROR(step_stmt.Run());
      for (int64_t id : rec.sample_ids) {
        consume.Bind(1, epoch);
        consume.Bind(2, id);
        consume.Bind(3, rec.step);
        Status s = consume.Run();
        if (!s.ok()) {
          if (s.code() == StatusCode::kFailedPrecondition) {
            return Status::Internal(
                fmt::format("{}: sample {} of epoch {} would be consumed a second time at step {}; refusing the commit",
                            db_->path(), id, epoch, rec.step));
          }
          return s;
        }
      }
    }
    MAESTRO_RETURN_IF_ERROR(env_->BeforeDurableOp(DurableOp::kStepCommit, db_->path()));
    return db_->Commit();
  };
  Status s = body();
  if (!s.ok()) db_->RollbackQuietly();
  return s;
}

StatusOr<std::optional<StepRecord>> SampleIndex::CommittedStep(int64_t step) {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT sample_ids, schedule FROM steps WHERE step=?"));
  stmt.Bind(1, step);
  MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<StepRecord>();
  StepRecord rec;
  rec.step = step;
  const nlohmann::json ids = nlohmann::json::parse(stmt.Text(0), nullptr, false);
  if (!ids.is_array()) {
    return Status::Corruption(fmt::format("{}: steps.sample_ids of step {} is not a JSON array", db_->path(), step));
  }
  for (const auto& id : ids) {
    if (!id.is_number_integer()) {
      return Status::Corruption(fmt::format("{}: steps.sample_ids of step {} holds a non-integer", db_->path(), step));
    }
    rec.sample_ids.push_back(id.get<int64_t>());
  }
  rec.schedule_json = stmt.Text(1);
  return std::optional<StepRecord>(std::move(rec));
}

StatusOr<std::vector<int64_t>> SampleIndex::CommittedCheckpoints() {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT checkpoint_step FROM checkpoints ORDER BY checkpoint_step"));
  std::vector<int64_t> out;
  for (;;) {
    MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(stmt.Int(0));
  }
  return out;
}

StatusOr<int64_t> SampleIndex::ConsumedCount(int64_t epoch) {
  MAESTRO_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT count(*) FROM consumed WHERE epoch=?"));
  stmt.Bind(1, epoch);
  MAESTRO_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.Int(0) : int64_t{0};
}

}  // namespace maestro::datalayer
