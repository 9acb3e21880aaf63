// SPDX-License-Identifier: Apache-2.0
#include "datalayer/activation_spool.h"

#include <fmt/format.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "datalayer/checks.h"
#include "datalayer/crc32c.h"

// H5Fget_eoa and H5Fincrement_filesize (RepairEndOfAllocation) arrived in
// HDF5 1.10.2.
#if !H5_VERSION_GE(1, 10, 2)
#error "the activation spool needs HDF5 1.10.2 or newer (H5Fget_eoa, H5Fincrement_filesize); docs/datalayer.md"
#endif

namespace maestro::datalayer {
namespace {

constexpr int kSpoolLayoutVersion = 1;
// Largest half-width of a chunk B-tree node HDF5 accepts (2 K <= 65536).
constexpr hsize_t kMaxIstoreK = 32767;
// Rows at least this large are written to the file at Put() without staging.
constexpr int64_t kDirectWriteBytes = int64_t{64} << 10;
// Columns of /rows (int64): the commit record, mirrored for h5dump readers.
constexpr hsize_t kRowColumns = 10;
constexpr const char* kRowColumnNames = "sample_id,epoch,value_offset,value_count,crc32c,ndim,d0,d1,d2,d3";

hid_t NativeType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return H5T_NATIVE_FLOAT;
    case DType::kF16:
    case DType::kBF16: return H5T_NATIVE_UINT16;  // raw bits; attribute "dtype" says which
    case DType::kI32: return H5T_NATIVE_INT32;
    case DType::kI64: return H5T_NATIVE_INT64;
    case DType::kU8: return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}

// Closes an hid_t with the given H5*close function when it goes out of scope.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5_CHECK(type.get(), name);
  H5_CHECK(H5Tset_size(type.get(), std::max<size_t>(1, value.size())), name);
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  H5_CHECK(attr.get(), name);
  H5_CHECK(H5Awrite(attr.get(), type.get(), value.data()), name);
  return Status::Ok();
}

StatusOr<std::string> ReadStringAttribute(hid_t obj, const char* name) {
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5_CHECK(attr.get(), name);
  H5Handle type(H5Aget_type(attr.get()), H5Tclose);
  const size_t size = H5Tget_size(type.get());
  std::string out(size, '\0');
  H5_CHECK(H5Aread(attr.get(), type.get(), out.data()), name);
  out.resize(std::strlen(out.c_str()));
  return out;
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 1;
}

StatusOr<DType> ParseDType(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (name == DTypeName(d)) return d;
  }
  return Status::InvalidArgument(fmt::format("unknown spool dtype '{}' (one of f32, f16, bf16, i32, i64, u8)", name));
}

ActivationSpool::ActivationSpool(std::string path, SqliteDb* db, SpoolOptions options, Env* env)
    : path_(std::move(path)), db_(db), options_(std::move(options)), env_(env) {}

ActivationSpool::~ActivationSpool() {
  CloseFile();
}

void ActivationSpool::CloseFile() {
  if (rows_ >= 0) H5Dclose(rows_);
  if (values_ >= 0) H5Dclose(values_);
  if (file_ >= 0) H5Fclose(file_);
  rows_ = values_ = file_ = -1;
  direct_.reset();
}

StatusOr<std::unique_ptr<ActivationSpool>> ActivationSpool::Open(const std::string& h5_path, SqliteDb* db,
                                                                 const SpoolOptions& options, Env* env) {
  internal::SilenceHdf5Errors();
  if (options.name.empty()) return Status::InvalidArgument("spool needs a name (e.g. \"teacher.topk_logits\")");
  if (options.chunk_bytes < static_cast<int64_t>(DTypeSize(options.dtype))) {
    return Status::InvalidArgument(
        fmt::format("spool {}: chunk_bytes {} is too small", options.name, options.chunk_bytes));
  }
  std::unique_ptr<ActivationSpool> spool(new ActivationSpool(h5_path, db, options, env));
  MAESTRO_RETURN_IF_ERROR(spool->OpenOrCreateFile());
  MAESTRO_RETURN_IF_ERROR(spool->LoadRecords());
  return spool;
}

StatusOr<std::unique_ptr<ActivationSpool>> ActivationSpool::OpenSealed(const std::string& h5_path,
                                                                       const SpoolOptions& options,
                                                                       int64_t committed_rows) {
  internal::SilenceHdf5Errors();
  std::unique_ptr<ActivationSpool> spool(new ActivationSpool(h5_path, nullptr, options, Env::Default()));
  spool->read_only_ = true;
  spool->file_ = H5Fopen(h5_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (spool->file_ < 0) return Status::IOError(internal::Hdf5Detail(h5_path));
  spool->values_ = H5Dopen2(spool->file_, "/values", H5P_DEFAULT);
  spool->rows_ = H5Dopen2(spool->file_, "/rows", H5P_DEFAULT);
  if (spool->values_ < 0 || spool->rows_ < 0) return Status::IOError(internal::Hdf5Detail(h5_path));
  auto dtype = ReadStringAttribute(spool->values_, "dtype");
  if (!dtype.ok() || *dtype != DTypeName(options.dtype)) {
    return Status::FailedPrecondition(fmt::format("{}: holds dtype {}, not {}", h5_path,
                                                  dtype.ok() ? *dtype : std::string("?"), DTypeName(options.dtype)));
  }
  hsize_t values_extent[1] = {0}, rows_extent[2] = {0, 0};
  {
    H5Handle space(H5Dget_space(spool->values_), H5Sclose);
    H5Handle rspace(H5Dget_space(spool->rows_), H5Sclose);
    if (space.get() < 0 || H5Sget_simple_extent_dims(space.get(), values_extent, nullptr) != 1 || rspace.get() < 0 ||
        H5Sget_simple_extent_dims(rspace.get(), rows_extent, nullptr) != 2 || rows_extent[1] != kRowColumns ||
        static_cast<hsize_t>(committed_rows) > rows_extent[0]) {
      return Status::IOError(fmt::format("{}: extents unreadable or short of {} rows", h5_path, committed_rows));
    }
  }
  if (committed_rows > 0) {
    std::vector<int64_t> table(static_cast<size_t>(committed_rows) * kRowColumns);
    hsize_t start[2] = {0, 0}, count[2] = {static_cast<hsize_t>(committed_rows), kRowColumns};
    H5Handle fspace(H5Dget_space(spool->rows_), H5Sclose);
    H5Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
    if (fspace.get() < 0 || mspace.get() < 0 ||
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(spool->rows_, H5T_NATIVE_INT64, mspace.get(), fspace.get(), H5P_DEFAULT, table.data()) < 0) {
      return Status::IOError("/rows unreadable: " + internal::Hdf5Detail(h5_path));
    }
    for (int64_t i = 0; i < committed_rows; ++i) {
      const int64_t* t = &table[static_cast<size_t>(i) * kRowColumns];
      RowRecord rec;
      rec.epoch = t[1];
      rec.offset = t[2];
      rec.count = t[3];
      rec.crc = static_cast<uint32_t>(t[4]);
      if (t[5] < 0 || t[5] > 4 || rec.offset < 0 || rec.count < 0 ||
          static_cast<hsize_t>(rec.offset + rec.count) > values_extent[0]) {
        ++spool->stats_.corrupt_rows;
        continue;
      }
      for (int64_t d = 0; d < t[5]; ++d) rec.dims.push_back(t[6 + d]);
      spool->committed_[t[0]] = std::move(rec);  // a later row of the same sample replaces it
    }
  }
  spool->committed_table_rows_ = committed_rows;
  spool->stats_.committed_rows = static_cast<int64_t>(spool->committed_.size());
  return spool;
}

std::vector<int64_t> ActivationSpool::CommittedSamples() const {
  std::vector<int64_t> out;
  out.reserve(committed_.size());
  for (const auto& [sample, record] : committed_) out.push_back(sample);
  return out;
}

Status ActivationSpool::Close() {
  if (!read_only_) MAESTRO_RETURN_IF_ERROR(Commit());
  CloseFile();
  committed_.clear();
  return Status::Ok();
}

Status ActivationSpool::OpenOrCreateFile() {
  const std::string& name = options_.name;
  H5Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  // No chunk cache for /values: a write then goes straight to the chunk's
  // place in the file (one pwrite, like fwrite) instead of being copied into
  // the cache first; the spool stages whole rows itself.
  H5_CHECK(H5Pset_chunk_cache(dapl.get(), 0, 0, 1.0), path_);
  // Chunks (>= 64 KiB) start on a 4 KiB page: writes then cover whole pages.
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5_CHECK(H5Pset_alignment(fapl.get(), 64 << 10, 4096), path_);
  bool fresh = true;
  const std::string fresh_path = path_ + ".new";
  if (env_->FileExists(path_)) {
    file_ = H5Fopen(path_.c_str(), H5F_ACC_RDWR, fapl.get());
    if (file_ >= 0) {
      values_ = H5Dopen2(file_, "/values", dapl.get());
      rows_ = H5Dopen2(file_, "/rows", H5P_DEFAULT);
    }
    std::string why;
    if (file_ < 0 || values_ < 0 || rows_ < 0) {
      why = internal::Hdf5Detail("");
    } else {
      // First the end of allocation (no read of the chunk index before it),
      // then the checks, which read every committed chunk.
      MAESTRO_ASSIGN_OR_RETURN(why, RepairEndOfAllocation());
      if (why.empty()) {
        MAESTRO_ASSIGN_OR_RETURN(why, CheckOpenedFile());
      }
    }
    if (!why.empty()) {
      CloseFile();
      Log(LogLevel::kWarn, "spool {}: {} is unreadable ({}); moving it to {}.corrupt, its rows will be recomputed",
          name, path_, why, path_);
      MAESTRO_RETURN_IF_ERROR(env_->RenameFile(path_, path_ + ".corrupt"));
    } else {
      fresh = false;
    }
  }
  if (fresh) {
    // Default (earliest) file format: after kill -9 a flushed file reopens
    // with its data up to the last flush, without h5clear. The file is made
    // complete under <path>.new and renamed once its records are reset, so
    // a kill during the creation never leaves a half-made file at `path`.
    // The chunk index (a v1 B-tree) gets nodes wide enough for every chunk
    // the budget allows, so that it never splits: a split rewrites the root
    // in place before the new nodes it points to are written (a flush
    // writes in address order), and a kill -9 between the two loses the
    // index of every chunk, committed ones included (docs/datalayer.md).
    // HDF5 allows 65536 entries a node; a budget past that many chunks can
    // split. The price: each flush rewrites the whole node (32-40 bytes per
    // entry, 128 KiB for 16 GiB of 4 MiB chunks).
    H5Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    const hsize_t budget_chunks =
        static_cast<hsize_t>(options_.budget_bytes / std::max<int64_t>(1, options_.chunk_bytes)) + 1;
    const auto istore_k = static_cast<unsigned>(std::clamp<hsize_t>((budget_chunks + 1) / 2, 32, kMaxIstoreK));
    H5_CHECK(H5Pset_istore_k(fcpl.get(), istore_k), fresh_path);
    file_ = H5Fcreate(fresh_path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
    H5_CHECK(file_, "cannot create spool file " + fresh_path + "; check that its directory is writable");
    const hsize_t elem = DTypeSize(options_.dtype);
    const hsize_t chunk_elems = std::max<hsize_t>(1, static_cast<hsize_t>(options_.chunk_bytes) / elem);
    {
      hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED};
      H5Handle space(H5Screate_simple(1, dims, maxdims), H5Sclose);
      H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5_CHECK(H5Pset_chunk(dcpl.get(), 1, &chunk_elems), path_);
      H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), path_);  // every value is written
      values_ =
          H5Dcreate2(file_, "/values", NativeType(options_.dtype), space.get(), H5P_DEFAULT, dcpl.get(), dapl.get());
      H5_CHECK(values_, path_ + ":/values");
      MAESTRO_RETURN_IF_ERROR(WriteStringAttribute(values_, "dtype", DTypeName(options_.dtype)));
      MAESTRO_RETURN_IF_ERROR(WriteStringAttribute(values_, "spool", name));
      MAESTRO_RETURN_IF_ERROR(WriteStringAttribute(values_, "layout_version", std::to_string(kSpoolLayoutVersion)));
    }
    {
      hsize_t dims[2] = {0, kRowColumns}, maxdims[2] = {H5S_UNLIMITED, kRowColumns};
      hsize_t chunk[2] = {128, kRowColumns};  // 10 KiB: a flush rewrites little
      H5Handle space(H5Screate_simple(2, dims, maxdims), H5Sclose);
      H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5_CHECK(H5Pset_chunk(dcpl.get(), 2, chunk), path_);
      rows_ = H5Dcreate2(file_, "/rows", H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT);
      H5_CHECK(rows_, path_ + ":/rows");
      MAESTRO_RETURN_IF_ERROR(WriteStringAttribute(rows_, "columns", kRowColumnNames));
    }
    H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL), fresh_path);
    MAESTRO_RETURN_IF_ERROR(SyncFile(fresh_path));
  }
  // A fresh file has no rows: drop whatever records an older file left.
  if (fresh) {
    MAESTRO_RETURN_IF_ERROR(db_->Begin());
    auto reset = [&]() -> Status {
      MAESTRO_ASSIGN_OR_RETURN(auto del, db_->Prepare("DELETE FROM spool_rows WHERE spool=?"));
      del.Bind(1, name);
      MAESTRO_RETURN_IF_ERROR(del.Run());
      MAESTRO_ASSIGN_OR_RETURN(auto up, db_->Prepare("INSERT OR REPLACE INTO spools(spool, file, dtype, "
                                                     "committed_values, committed_rows) VALUES(?, ?, ?, 0, 0)"));
      up.Bind(1, name);
      up.Bind(2, path_);
      up.Bind(3, std::string(DTypeName(options_.dtype)));
      MAESTRO_RETURN_IF_ERROR(up.Run());
      return db_->Commit();
    };
    Status s = reset();
    if (!s.ok()) {
      db_->RollbackQuietly();
      return s;
    }
    // The handles stay valid across the rename (POSIX).
    MAESTRO_RETURN_IF_ERROR(env_->RenameFile(fresh_path, path_));
  }
  return Status::Ok();
}

Status ActivationSpool::SyncFile(const std::string& path) {
  void* handle = nullptr;
  H5_CHECK(H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle), path);
  if (handle != nullptr && ::fsync(*static_cast<int*>(handle)) != 0) {
    return Status::IOError(fmt::format("fsync {}: {}", path, std::strerror(errno)));
  }
  return Status::Ok();
}

StatusOr<std::string> ActivationSpool::RepairEndOfAllocation() {
  // Why (docs/datalayer.md, "kill -9 inside H5Fflush"): H5Fflush writes the
  // chunk index and object headers first and the superblock, which holds
  // the end of allocation (EOA), last. A kill between them leaves chunks
  // named on disk past the recorded EOA. H5Fopen accepts such a file (it
  // only refuses one shorter than its EOA); HDF5 then refuses every read or
  // write there ("addr overflow"), and its next allocation, at the old EOA,
  // would overlap those chunks. Every chunk named on disk was written before
  // the metadata that names it (a flush writes raw data first), so it
  // starts below the file's size (EOF) and ends at most one chunk later:
  // EOA = EOF + the largest chunk covers all of them.
  haddr_t eoa = 0;
  if (H5Fget_eoa(file_, &eoa) < 0) return "end of allocation unreadable: " + internal::Hdf5Detail("");
  void* handle = nullptr;
  struct stat st {};
  if (H5Fget_vfd_handle(file_, H5P_DEFAULT, &handle) < 0 || handle == nullptr ||
      ::fstat(*static_cast<int*>(handle), &st) != 0) {
    return Status::IOError(fmt::format("spool {}: cannot read the size of {}: {}", options_.name, path_,
                                       internal::Hdf5Detail(std::strerror(errno))));
  }
  const auto eof = static_cast<haddr_t>(st.st_size);
  if (eof <= eoa) return std::string();
  hsize_t largest_chunk = 0;
  for (hid_t dataset : {static_cast<hid_t>(values_), static_cast<hid_t>(rows_)}) {
    H5Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
    H5Handle type(H5Dget_type(dataset), H5Tclose);
    hsize_t dims[H5S_MAX_RANK];
    const int rank = dcpl.get() < 0 ? -1 : H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, dims);
    if (type.get() < 0 || rank <= 0) return "chunk layout unreadable: " + internal::Hdf5Detail("");
    hsize_t bytes = H5Tget_size(type.get());
    for (int i = 0; i < rank; ++i) bytes *= dims[i];
    largest_chunk = std::max(largest_chunk, bytes);
  }
  if (H5Fincrement_filesize(file_, largest_chunk) < 0) {
    return "cannot move the end of allocation: " + internal::Hdf5Detail("");
  }
  Log(LogLevel::kInfo,
      "spool {}: {} holds {} bytes but records its allocation as ending at {} (killed after writing past its last "
      "flush); the allocation now ends at {}",
      options_.name, path_, eof, eoa, eof + largest_chunk);
  return std::string();
}

StatusOr<std::string> ActivationSpool::CheckOpenedFile() {
  const std::string& name = options_.name;
  // The attributes: a dtype that reads back but differs is the caller's
  // mistake (an error); one that does not read back is a torn file.
  auto dtype = ReadStringAttribute(values_, "dtype");
  if (!dtype.ok()) return "attribute /values:dtype unreadable: " + dtype.status().message();
  if (*dtype != DTypeName(options_.dtype)) {
    return Status::FailedPrecondition(
        fmt::format("spool {}: {} holds dtype {} but the run asks for {}; use a new run directory", name, path_, *dtype,
                    DTypeName(options_.dtype)));
  }
  for (const char* attr : {"spool", "layout_version"}) {
    auto value = ReadStringAttribute(values_, attr);
    if (!value.ok()) return fmt::format("attribute /values:{} unreadable: {}", attr, value.status().message());
  }
  if (auto columns = ReadStringAttribute(rows_, "columns"); !columns.ok()) {
    return "attribute /rows:columns unreadable: " + columns.status().message();
  }
  // The extents, against the commit records in SQLite.
  hsize_t values_extent[1] = {0}, rows_extent[2] = {0, 0};
  {
    H5Handle space(H5Dget_space(values_), H5Sclose);
    if (space.get() < 0 || H5Sget_simple_extent_dims(space.get(), values_extent, nullptr) != 1) {
      return "/values extent unreadable: " + internal::Hdf5Detail("");
    }
  }
  {
    H5Handle space(H5Dget_space(rows_), H5Sclose);
    if (space.get() < 0 || H5Sget_simple_extent_dims(space.get(), rows_extent, nullptr) != 2 ||
        rows_extent[1] != kRowColumns) {
      return "/rows extent unreadable or not (n, 10): " + internal::Hdf5Detail("");
    }
  }
  int64_t committed_values = 0, committed_rows = 0;
  {
    MAESTRO_ASSIGN_OR_RETURN(auto meta,
                             db_->Prepare("SELECT committed_values, committed_rows FROM spools WHERE spool=?"));
    meta.Bind(1, name);
    MAESTRO_ASSIGN_OR_RETURN(bool have, meta.Step());
    if (have) {
      committed_values = meta.Int(0);
      committed_rows = meta.Int(1);
    }
  }
  if (static_cast<hsize_t>(committed_values) > values_extent[0] ||
      static_cast<hsize_t>(committed_rows) > rows_extent[0]) {
    return fmt::format("the file holds {} values and {} rows but {} records {} and {}", values_extent[0],
                       rows_extent[0], db_->path(), committed_values, committed_rows);
  }
  // The chunk index: one value of every committed chunk of /values, the last
  // committed value, and the whole committed /rows table (80 bytes a row).
  // A torn file's metadata fails here ("addr overflow") instead of later.
  const size_t elem = DTypeSize(options_.dtype);
  const auto chunk_elems =
      static_cast<int64_t>(std::max<hsize_t>(1, static_cast<hsize_t>(options_.chunk_bytes) / elem));
  std::vector<std::byte> one(elem);
  auto read_value = [&](int64_t at) -> bool {
    hsize_t start[1] = {static_cast<hsize_t>(at)}, count[1] = {1};
    H5Handle fspace(H5Dget_space(values_), H5Sclose);
    H5Handle mspace(H5Screate_simple(1, count, nullptr), H5Sclose);
    return fspace.get() >= 0 && mspace.get() >= 0 &&
           H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
           H5Dread(values_, NativeType(options_.dtype), mspace.get(), fspace.get(), H5P_DEFAULT, one.data()) >= 0;
  };
  for (int64_t at = 0; at < committed_values; at += chunk_elems) {
    if (!read_value(at)) return fmt::format("/values element {} unreadable: {}", at, internal::Hdf5Detail(""));
  }
  if (committed_values > 0 && !read_value(committed_values - 1)) {
    return fmt::format("/values element {} unreadable: {}", committed_values - 1, internal::Hdf5Detail(""));
  }
  if (committed_rows > 0) {
    std::vector<int64_t> table(static_cast<size_t>(committed_rows) * kRowColumns);
    hsize_t start[2] = {0, 0}, count[2] = {static_cast<hsize_t>(committed_rows), kRowColumns};
    H5Handle fspace(H5Dget_space(rows_), H5Sclose);
    H5Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
    const bool ok = fspace.get() >= 0 && mspace.get() >= 0 &&
                    H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
                    H5Dread(rows_, H5T_NATIVE_INT64, mspace.get(), fspace.get(), H5P_DEFAULT, table.data()) >= 0;
    if (!ok) return "/rows unreadable: " + internal::Hdf5Detail("");
  }
  return std::string();
}

Status ActivationSpool::StartFresh(const std::string& why) {
  Log(LogLevel::kWarn,
      "spool {}: {} failed ({}); moving it to {}.corrupt and starting a fresh file, its {} committed and {} staged "
      "rows will be recomputed",
      options_.name, path_, why, path_, committed_.size(), pending_.size());
  stats_.corrupt_rows += static_cast<int64_t>(committed_.size());
  committed_.clear();
  pending_.clear();
  staged_.clear();
  torn_ = false;
  CloseFile();
  if (env_->FileExists(path_)) MAESTRO_RETURN_IF_ERROR(env_->RenameFile(path_, path_ + ".corrupt"));
  // No file: OpenOrCreateFile creates one and drops this spool's records
  // (one transaction on spool_rows/spools only; the sample index is untouched).
  MAESTRO_RETURN_IF_ERROR(OpenOrCreateFile());
  const int64_t corrupt = stats_.corrupt_rows;
  MAESTRO_RETURN_IF_ERROR(LoadRecords());
  stats_.corrupt_rows = corrupt;
  return Status::Ok();
}

Status ActivationSpool::LoadRecords() {
  const std::string& name = options_.name;
  MAESTRO_ASSIGN_OR_RETURN(auto meta,
                           db_->Prepare("SELECT dtype, committed_values, committed_rows FROM spools WHERE spool=?"));
  meta.Bind(1, name);
  MAESTRO_ASSIGN_OR_RETURN(bool have, meta.Step());
  if (!have) {
    return Status::Corruption(
        fmt::format("spool {}: {} exists but {} has no record of it; delete the spool file", name, path_, db_->path()));
  }
  if (meta.Text(0) != DTypeName(options_.dtype)) {
    return Status::FailedPrecondition(fmt::format("spool {}: recorded dtype {} but the run asks for {}", name,
                                                  meta.Text(0), DTypeName(options_.dtype)));
  }
  committed_values_ = meta.Int(1);
  committed_table_rows_ = meta.Int(2);
  hsize_t extent[1] = {0};
  {
    H5Handle space(H5Dget_space(values_), H5Sclose);
    if (space.get() < 0 || H5Sget_simple_extent_dims(space.get(), extent, nullptr) < 0) {
      // Torn metadata that CheckOpenedFile() did not reach. A fresh file's
      // extent always reads, so this recursion ends.
      return StartFresh("/values extent unreadable: " + internal::Hdf5Detail(""));
    }
  }
  MAESTRO_ASSIGN_OR_RETURN(auto rows, db_->Prepare("SELECT sample_id, epoch, value_offset, value_count, dims, crc32c "
                                                   "FROM spool_rows WHERE spool=?"));
  rows.Bind(1, name);
  committed_.clear();
  for (;;) {
    MAESTRO_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    RowRecord rec;
    rec.epoch = rows.Int(1);
    rec.offset = rows.Int(2);
    rec.count = rows.Int(3);
    const nlohmann::json dims = nlohmann::json::parse(rows.Text(4), nullptr, false);
    if (!dims.is_array()) {
      ++stats_.corrupt_rows;
      continue;
    }
    for (const auto& d : dims) rec.dims.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
    rec.crc = static_cast<uint32_t>(rows.Int(5));
    if (static_cast<hsize_t>(rec.offset + rec.count) > extent[0]) {
      ++stats_.corrupt_rows;  // the file lost data it had committed: recompute
      continue;
    }
    committed_[rows.Int(0)] = std::move(rec);
  }
  end_values_ = staged_offset_ = committed_values_;
  stats_.committed_rows = static_cast<int64_t>(committed_.size());
  stats_.committed_bytes = committed_values_ * static_cast<int64_t>(DTypeSize(options_.dtype));
  return Status::Ok();
}

StatusOr<std::optional<SpoolRow>> ActivationSpool::Get(int64_t sample_id, int64_t epoch) {
  SpoolRow row;
  MAESTRO_ASSIGN_OR_RETURN(const bool found, GetInto(sample_id, epoch, &row));
  if (!found) return std::optional<SpoolRow>();
  return std::optional<SpoolRow>(std::move(row));
}

StatusOr<bool> ActivationSpool::GetInto(int64_t sample_id, int64_t epoch, SpoolRow* out) {
  auto it = committed_.find(sample_id);
  if (it == committed_.end() || (!options_.reuse_across_epochs && it->second.epoch != epoch)) {
    ++stats_.misses;
    return false;
  }
  const RowRecord& rec = it->second;
  SpoolRow& row = *out;
  row.sample_id = sample_id;
  row.epoch = rec.epoch;
  row.dims = rec.dims;
  const size_t elem = DTypeSize(options_.dtype);
  row.data.resize(static_cast<size_t>(rec.count) * elem);  // no work at the same size
  // Straight from the file in pieces checked as they arrive
  // (datalayer/spool_values_read.h); through H5Dread where that cannot serve.
  bool ok = true;
  uint32_t crc = 0;
  if (!direct_) direct_ = DirectValuesOf(file_, values_, NativeType(options_.dtype));
  const std::optional<uint32_t> direct =
      rec.count > 0 ? ReadValuesDirect(*direct_, values_, rec.offset, rec.count, elem, row.data.data()) : 0;
  if (direct.has_value()) {
    crc = *direct;
  } else {
    H5Handle fspace(H5Dget_space(values_), H5Sclose);
    const hsize_t whole[1] = {static_cast<hsize_t>(rec.count)}, fstart[1] = {static_cast<hsize_t>(rec.offset)};
    H5Handle mspace(H5Screate_simple(1, whole, nullptr), H5Sclose);
    ok = fspace.get() >= 0 && mspace.get() >= 0 &&
         H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, fstart, nullptr, whole, nullptr) >= 0 &&
         H5Dread(values_, NativeType(options_.dtype), mspace.get(), fspace.get(), H5P_DEFAULT, row.data.data()) >= 0;
    if (ok) crc = Crc32c(row.data.data(), row.data.size());
  }
  if (!ok || crc != rec.crc) {
    Log(LogLevel::kWarn, "spool {}: row of sample {} in {} is {}; recomputing it", options_.name, sample_id, path_,
        ok ? "corrupt (checksum mismatch)" : "unreadable");
    ++stats_.corrupt_rows;
    ++stats_.misses;
    committed_.erase(it);
    return false;
  }
  ++stats_.hits;
  return true;
}

StatusOr<bool> ActivationSpool::Put(int64_t sample_id, int64_t epoch, const RowView& row) {
  if (read_only_ || file_ < 0) return Status::FailedPrecondition(fmt::format("spool {} is sealed or closed", path_));
  StatusOr<bool> put = PutOnce(sample_id, epoch, row);
  if (put.ok() || !torn_) return put;
  // The file failed under HDF5 (torn metadata): start a fresh one and stage
  // the row again there. A fresh file that fails too is a real error.
  MAESTRO_RETURN_IF_ERROR(StartFresh(put.status().message()));
  return PutOnce(sample_id, epoch, row);
}

StatusOr<bool> ActivationSpool::PutOnce(int64_t sample_id, int64_t epoch, const RowView& row) {
  const size_t elem = DTypeSize(options_.dtype);
  int64_t count = 1;
  for (int64_t d : row.dims) {
    if (d < 0) return Status::InvalidArgument(fmt::format("spool {}: negative dimension in row shape", options_.name));
    count *= d;
  }
  if (row.dims.size() > 4) {
    return Status::InvalidArgument(
        fmt::format("spool {}: rows have at most 4 dimensions, got {}", options_.name, row.dims.size()));
  }
  if (static_cast<size_t>(count) * elem != row.bytes || (row.bytes > 0 && row.data == nullptr)) {
    return Status::InvalidArgument(fmt::format("spool {}: row of sample {} has {} bytes but shape needs {} x {} bytes",
                                               options_.name, sample_id, row.bytes, count, elem));
  }
  if ((end_values_ + count) * static_cast<int64_t>(elem) > options_.budget_bytes) {
    ++stats_.rows_over_budget;
    return false;
  }
  PendingRow pending{sample_id, RowRecord{epoch, end_values_, count, row.dims, Crc32c(row.data, row.bytes)}};
  if (staged_.empty() && static_cast<int64_t>(row.bytes) >= kDirectWriteBytes) {
    // A large row goes straight into the file: no copy into the staging buffer.
    MAESTRO_RETURN_IF_ERROR(WriteValues(end_values_, row.data, count));
    staged_offset_ = end_values_ + count;
  } else {
    const auto* p = static_cast<const std::byte*>(row.data);
    staged_.insert(staged_.end(), p, p + row.bytes);
  }
  end_values_ += count;
  pending_.push_back(std::move(pending));
  ++stats_.rows_put;
  if (static_cast<int64_t>(staged_.size()) >= options_.chunk_bytes) MAESTRO_RETURN_IF_ERROR(WriteStaged());
  return true;
}

Status ActivationSpool::WriteValues(int64_t offset, const void* data, int64_t elems) {
  MAESTRO_RETURN_IF_ERROR(env_->BeforeDurableOp(DurableOp::kSpoolWrite, path_));
  Status s = WriteValuesToFile(offset, data, elems);
  if (!s.ok()) torn_ = true;
  return s;
}

Status ActivationSpool::WriteValuesToFile(int64_t offset, const void* data, int64_t elems) {
  hsize_t new_extent[1] = {static_cast<hsize_t>(offset + elems)};
  hsize_t extent[1] = {0};
  {
    H5Handle space(H5Dget_space(values_), H5Sclose);
    H5_CHECK(H5Sget_simple_extent_dims(space.get(), extent, nullptr), path_);
  }
  if (new_extent[0] > extent[0]) H5_CHECK(H5Dset_extent(values_, new_extent), path_ + ":/values");
  hsize_t start[1] = {static_cast<hsize_t>(offset)}, count[1] = {static_cast<hsize_t>(elems)};
  H5Handle fspace(H5Dget_space(values_), H5Sclose);
  H5Handle mspace(H5Screate_simple(1, count, nullptr), H5Sclose);
  H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path_);
  H5_CHECK(H5Dwrite(values_, NativeType(options_.dtype), mspace.get(), fspace.get(), H5P_DEFAULT, data),
           path_ + ":/values (is the disk full?)");
  return Status::Ok();
}

Status ActivationSpool::WriteStaged() {
  if (staged_.empty()) return Status::Ok();
  const auto elems = static_cast<int64_t>(staged_.size() / DTypeSize(options_.dtype));
  MAESTRO_RETURN_IF_ERROR(WriteValues(staged_offset_, staged_.data(), elems));
  staged_offset_ += elems;
  staged_.clear();
  return Status::Ok();
}

Status ActivationSpool::AppendRowTable() {
  const auto n = static_cast<hsize_t>(pending_.size());
  std::vector<int64_t> table(n * kRowColumns, 0);
  for (size_t i = 0; i < pending_.size(); ++i) {
    const RowRecord& r = pending_[i].record;
    int64_t* t = &table[i * kRowColumns];
    t[0] = pending_[i].sample_id;
    t[1] = r.epoch;
    t[2] = r.offset;
    t[3] = r.count;
    t[4] = r.crc;
    t[5] = static_cast<int64_t>(r.dims.size());
    for (size_t d = 0; d < r.dims.size(); ++d) t[6 + d] = r.dims[d];
  }
  hsize_t new_extent[2] = {static_cast<hsize_t>(committed_table_rows_) + n, kRowColumns};
  H5_CHECK(H5Dset_extent(rows_, new_extent), path_ + ":/rows");
  hsize_t start[2] = {static_cast<hsize_t>(committed_table_rows_), 0}, count[2] = {n, kRowColumns};
  H5Handle fspace(H5Dget_space(rows_), H5Sclose);
  H5Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
  H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), path_);
  H5_CHECK(H5Dwrite(rows_, H5T_NATIVE_INT64, mspace.get(), fspace.get(), H5P_DEFAULT, table.data()), path_ + ":/rows");
  return Status::Ok();
}

Status ActivationSpool::Commit() {
  if (pending_.empty()) return Status::Ok();
  if (read_only_) return Status::FailedPrecondition(fmt::format("spool {} is sealed", path_));
  // 1. values and the row table into the file; 2. flush HDF5's caches. An
  // HDF5 failure here (a file torn by an earlier crash) drops the file and
  // its rows, staged ones included: they are recomputed, the run goes on.
  Status written = WriteStaged();
  if (written.ok()) {
    written = AppendRowTable();
    if (!written.ok()) torn_ = true;
  }
  if (written.ok()) {
    written = env_->BeforeDurableOp(DurableOp::kSpoolFlush, path_);
    if (written.ok() && H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) {
      written = Status::IOError(internal::Hdf5Detail(path_));
      torn_ = true;
    }
  }
  if (!written.ok()) {
    if (!torn_) return written;
    return StartFresh(written.message());
  }
  // 2b. fsync the file.
  MAESTRO_RETURN_IF_ERROR(SyncFile(path_));
  // 3. only now: the commit record.
  const int64_t new_table_rows = committed_table_rows_ + static_cast<int64_t>(pending_.size());
  // The commit record need not survive a power loss (a lost record only
  // means a recomputation), so this one transaction skips SQLite's WAL fsync
  // (synchronous=NORMAL: still atomic and ordered; the next FULL commit,
  // e.g. the step commit, makes it durable). A process crash loses nothing.
  MAESTRO_RETURN_IF_ERROR(db_->Exec("PRAGMA synchronous=NORMAL"));
  struct RestoreFull {
    SqliteDb* db;
    ~RestoreFull() { (void)db->Exec("PRAGMA synchronous=FULL"); }
  } restore_full{db_};
  MAESTRO_RETURN_IF_ERROR(db_->Begin());
  auto body = [&]() -> Status {
    MAESTRO_ASSIGN_OR_RETURN(auto ins, db_->Prepare("INSERT OR REPLACE INTO spool_rows(spool, sample_id, epoch, "
                                                    "value_offset, value_count, dims, crc32c) VALUES(?,?,?,?,?,?,?)"));
    for (const PendingRow& p : pending_) {
      ins.Bind(1, options_.name);
      ins.Bind(2, p.sample_id);
      ins.Bind(3, p.record.epoch);
      ins.Bind(4, p.record.offset);
      ins.Bind(5, p.record.count);
      ins.Bind(6, nlohmann::json(p.record.dims).dump());
      ins.Bind(7, static_cast<int64_t>(p.record.crc));
      MAESTRO_RETURN_IF_ERROR(ins.Run());
    }
    MAESTRO_ASSIGN_OR_RETURN(auto up,
                             db_->Prepare("UPDATE spools SET committed_values=?, committed_rows=? WHERE spool=?"));
    up.Bind(1, end_values_);
    up.Bind(2, new_table_rows);
    up.Bind(3, options_.name);
    MAESTRO_RETURN_IF_ERROR(up.Run());
    MAESTRO_RETURN_IF_ERROR(env_->BeforeDurableOp(DurableOp::kSpoolCommit, db_->path()));
    return db_->Commit();
  };
  if (Status s = body(); !s.ok()) {
    db_->RollbackQuietly();
    return s;
  }
  for (PendingRow& p : pending_) committed_[p.sample_id] = std::move(p.record);
  pending_.clear();
  committed_values_ = end_values_;
  committed_table_rows_ = new_table_rows;
  stats_.committed_rows = static_cast<int64_t>(committed_.size());
  stats_.committed_bytes = committed_values_ * static_cast<int64_t>(DTypeSize(options_.dtype));
  return Status::Ok();
}

}  // namespace maestro::datalayer
