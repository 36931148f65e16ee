#include "trainer/io/safetensors_writer.h"

#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "trainer/io/safetensors.h"
#include "trainer/io/safetensors_internal.h"
#include "trainer/io/safetensors_layout.h"

namespace eft::trainer {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace safetensors_internal;

namespace {

uint64_t Numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t Bytes(const TensorDecl& t) { return Numel(t.shape) * DtypeByType(t.dtype)->size; }

// Writes all of [p, p+n) to fd, retrying short writes (a single write() stops near 2 GiB).
Status WriteAll(int fd, const void* p, size_t n, const std::string& what) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("writing " + what + ": " + ErrnoString(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// A rename is only durable once the directory entry is on disk.
Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("opening directory " + dir + ": " + ErrnoString(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError("fsync " + dir + ": " + ErrnoString(err));
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  std::string d = fs::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

// Creates `path` atomically: `body` fills a temporary file beside it, which is fsynced and renamed
// over `path`, so readers see the old file or the complete new one, never a torn one.
Status WriteAtomically(const std::string& path, const std::function<Status(int fd, const std::string& tmp)>& body) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("creating " + tmp + ": " + ErrnoString(errno));
  Status s = body(fd, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::IoError("fsync " + tmp + ": " + ErrnoString(errno));
  if (::close(fd) != 0 && s.ok()) s = Status::IoError("closing " + tmp + ": " + ErrnoString(errno));
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IoError("renaming " + tmp + " to " + path + ": " + ErrnoString(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(DirOf(path));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// One file

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(const std::string& path,
                                                                     std::vector<TensorDecl> tensors,
                                                                     const std::map<std::string, std::string>& metadata,
                                                                     uint64_t chunk_bytes, Durability durability) {
  if (chunk_bytes == 0 || chunk_bytes % 4096 != 0) {
    return Status::InvalidArgument(path + ": chunk_bytes must be a positive multiple of 4096");
  }
  EFT_ASSIGN_OR_RETURN(SafetensorsLayout layout, LayOutSafetensors(path, tensors, metadata));
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp." + std::to_string(::getpid());
  w->tensors_ = std::move(tensors);
  w->chunk_bytes_ = chunk_bytes;
  w->durability_ = durability;
  w->fd_ = ::open(w->tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return Status::IoError("creating " + w->tmp_ + ": " + ErrnoString(errno));
  EFT_RETURN_IF_ERROR(w->Write(layout.header.data(), layout.header.size()));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

Status SafetensorsWriter::Write(const void* data, uint64_t n) {
  if (failed_) return Status::FailedPrecondition(tmp_ + ": an earlier write failed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Pieces end on chunk boundaries, so writeback can be started chunk by chunk.
    const uint64_t piece = std::min(n, chunk_bytes_ - offset_ % chunk_bytes_);
    crc_ = Crc32c(p, piece, crc_);
    Status s = WriteAll(fd_, p, piece, tmp_);
    if (!s.ok()) {
      failed_ = true;
      return s;
    }
    offset_ += piece;
    p += piece;
    n -= piece;
    if (offset_ % chunk_bytes_ != 0 || durability_ == Durability::kVolatile) continue;
    // Advisory: a filesystem without sync_file_range (or fadvise) still gets the fsync in Finish.
    ::sync_file_range(fd_, static_cast<off_t>(synced_to_), static_cast<off_t>(offset_ - synced_to_),
                      SYNC_FILE_RANGE_WRITE);
    synced_to_ = offset_;
    if (offset_ >= 2 * chunk_bytes_) {
      const uint64_t end = offset_ - chunk_bytes_;  // the chunk before the one just started
      ::sync_file_range(fd_, static_cast<off_t>(dropped_to_), static_cast<off_t>(end - dropped_to_),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd_, static_cast<off_t>(dropped_to_), static_cast<off_t>(end - dropped_to_), POSIX_FADV_DONTNEED);
      dropped_to_ = end;
    }
  }
  return Status::Ok();
}

Status SafetensorsWriter::Append(const at::Tensor& tensor) {
  if (complete()) return Status::InvalidArgument(path_ + ": every declared tensor was appended already");
  const TensorDecl& decl = tensors_[next_];
  if (!tensor.defined() || static_cast<uint64_t>(tensor.numel()) != Numel(decl.shape)) {
    return Status::InvalidArgument(path_ + ": tensor '" + decl.name + "' declared with " +
                                   std::to_string(Numel(decl.shape)) + " elements, given " +
                                   std::to_string(tensor.defined() ? tensor.numel() : 0));
  }
  c10::NoGradGuard no_grad;
  // On the CPU in the right dtype a contiguous tensor is written in place; anything else is
  // converted first (one tensor at a time, so a model on an accelerator never needs a second full
  // copy in host memory).
  at::Tensor c = tensor.to(at::kCPU, decl.dtype).contiguous();
  EFT_RETURN_IF_ERROR(Write(c.data_ptr(), Bytes(decl)));
  ++next_;
  return Status::Ok();
}

Result<WrittenFile> SafetensorsWriter::Finish() {
  if (!complete()) {
    return Status::FailedPrecondition(path_ + ": " + std::to_string(tensors_.size() - next_) +
                                      " declared tensors were not appended, starting with '" + tensors_[next_].name + "'");
  }
  if (failed_) return Status::FailedPrecondition(tmp_ + ": an earlier write failed");
  Status s;
  const bool durable = durability_ == Durability::kDurable;
  if (durable && ::fsync(fd_) != 0) s = Status::IoError("fsync " + tmp_ + ": " + ErrnoString(errno));
  if (::close(fd_) != 0 && s.ok()) s = Status::IoError("closing " + tmp_ + ": " + ErrnoString(errno));
  fd_ = -1;
  if (s.ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    s = Status::IoError("renaming " + tmp_ + " to " + path_ + ": " + ErrnoString(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp_.c_str());
    return s;
  }
  if (durable) EFT_RETURN_IF_ERROR(SyncDir(DirOf(path_)));
  return WrittenFile{path_, static_cast<int64_t>(offset_), crc_};
}

Status WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata, WrittenFile* written,
                        Durability durability) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (!t.defined()) return Status::InvalidArgument(path + ": tensor '" + name + "' is undefined");
    if (t.layout() != at::kStrided) return Status::InvalidArgument(path + ": tensor '" + name + "' is not dense");
    if (DtypeByType(t.scalar_type()) == nullptr) {
      return Status::InvalidArgument(path + ": tensor '" + name + "' has dtype " +
                                     std::string(c10::toString(t.scalar_type())) + ", which safetensors cannot hold");
    }
    order[i] = i;
  }
  // As Hugging Face's writer: widest dtype first, then by name, so every tensor is aligned to its
  // element size.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = DtypeByType(tensors[a].second.scalar_type())->rank, rb = DtypeByType(tensors[b].second.scalar_type())->rank;
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });
  std::vector<TensorDecl> decls;
  for (size_t i : order) {
    decls.push_back({tensors[i].first, tensors[i].second.scalar_type(), tensors[i].second.sizes().vec()});
  }
  EFT_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, std::move(decls), metadata,
                                                              SafetensorsWriter::kChunkBytes, durability));
  for (size_t i : order) EFT_RETURN_IF_ERROR(writer->Append(tensors[i].second));
  EFT_ASSIGN_OR_RETURN(WrittenFile file, writer->Finish());
  if (written != nullptr) *written = file;
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// A model directory

Result<std::unique_ptr<SafetensorsDirWriter>> SafetensorsDirWriter::Create(const std::string& dir,
                                                                           std::vector<TensorDecl> tensors,
                                                                           uint64_t max_shard_bytes,
                                                                           std::map<std::string, std::string> metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  std::unique_ptr<SafetensorsDirWriter> w(new SafetensorsDirWriter());
  w->dir_ = dir;
  metadata.emplace("format", "pt");
  w->metadata_ = std::move(metadata);
  EFT_ASSIGN_OR_RETURN(w->shards_, PlanModelShards(dir, std::move(tensors), max_shard_bytes));
  EFT_RETURN_IF_ERROR(w->OpenShard(0));
  return w;
}

Status SafetensorsDirWriter::OpenShard(size_t i) {
  shard_ = i;
  EFT_ASSIGN_OR_RETURN(writer_, SafetensorsWriter::Create((fs::path(dir_) / shards_[i].name).string(), shards_[i].tensors, metadata_));
  return Status::Ok();
}

Status SafetensorsDirWriter::Append(const at::Tensor& tensor) {
  if (writer_ == nullptr) return Status::InvalidArgument(dir_ + ": every declared tensor was appended already");
  EFT_RETURN_IF_ERROR(writer_->Append(tensor));
  if (!writer_->complete()) return Status::Ok();
  EFT_ASSIGN_OR_RETURN(WrittenFile f, writer_->Finish());
  written_.push_back(std::move(f));
  writer_.reset();
  if (shard_ + 1 < shards_.size()) return OpenShard(shard_ + 1);
  return Status::Ok();
}

Result<std::vector<WrittenFile>> SafetensorsDirWriter::Finish() {
  if (writer_ != nullptr) {
    // Declared tensors were not all appended (Finish says which), or none were declared at all.
    if (!writer_->complete()) return writer_->Finish().status();
    EFT_ASSIGN_OR_RETURN(WrittenFile f, writer_->Finish());
    written_.push_back(std::move(f));
    writer_.reset();
  }
  if (shards_.size() > 1) {
    const std::string text = ModelIndexJson(shards_);
    const std::string path = (fs::path(dir_) / kModelIndexName).string();
    EFT_RETURN_IF_ERROR(WriteAtomically(path, [&](int fd, const std::string& tmp) {
      return WriteAll(fd, text.data(), text.size(), tmp);
    }));
    written_.push_back(WrittenFile{path, static_cast<int64_t>(text.size()), Crc32c(text.data(), text.size())});
  }
  EFT_RETURN_IF_ERROR(RemoveStaleModelFiles(dir_, shards_));
  EFT_RETURN_IF_ERROR(SyncDir(dir_));
  return written_;
}

Status WriteSafetensorsDir(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return Status::InvalidArgument(dir + ": tensor '" + name + "' is undefined");
    decls.push_back({name, t.scalar_type(), t.sizes().vec()});
  }
  EFT_ASSIGN_OR_RETURN(auto writer, SafetensorsDirWriter::Create(dir, std::move(decls), max_shard_bytes, metadata));
  for (const auto& [name, t] : tensors) EFT_RETURN_IF_ERROR(writer->Append(t));
  return writer->Finish().status();
}

}  // namespace eft::trainer
