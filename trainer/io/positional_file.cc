#include "trainer/io/positional_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "trainer/io/safetensors_internal.h"

namespace eft::trainer {

using safetensors_internal::ErrnoString;

Result<std::unique_ptr<PositionalFile>> PositionalFile::Open(const std::string& path, uint64_t chunk_bytes) {
  std::unique_ptr<PositionalFile> f(new PositionalFile());
  f->path_ = path;
  f->chunk_bytes_ = chunk_bytes == 0 ? kChunkBytes : chunk_bytes;
  f->fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (f->fd_ < 0) return Status::IoError("opening " + path + " for writing: " + ErrnoString(errno));
  return f;
}

PositionalFile::~PositionalFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status PositionalFile::Write(uint64_t offset, const void* data, uint64_t n) {
  if (fd_ < 0) return Status::FailedPrecondition(path_ + ": closed");
  const char* p = static_cast<const char*>(data);
  uint64_t at = offset, left = n;
  while (left > 0) {
    ssize_t w = ::pwrite(fd_, p, left, static_cast<off_t>(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError("writing " + path_ + ": " + ErrnoString(errno));
    }
    p += w;
    at += static_cast<uint64_t>(w);
    left -= static_cast<uint64_t>(w);
  }
  if (n == 0) return Status::Ok();
  if (!pending_.empty() && pending_.back().first + pending_.back().second == offset) {
    pending_.back().second += n;  // contiguous with the last write: one range
  } else {
    pending_.emplace_back(offset, n);
  }
  pending_bytes_ += n;
  if (pending_bytes_ < chunk_bytes_) return Status::Ok();
  // Advisory, as in SafetensorsWriter: a filesystem without these still gets the fsync at the end.
  for (const auto& [o, len] : started_) {
    ::sync_file_range(fd_, static_cast<off_t>(o), static_cast<off_t>(len),
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, static_cast<off_t>(o), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
  }
  for (const auto& [o, len] : pending_) {
    ::sync_file_range(fd_, static_cast<off_t>(o), static_cast<off_t>(len), SYNC_FILE_RANGE_WRITE);
  }
  started_ = std::move(pending_);
  pending_.clear();
  pending_bytes_ = 0;
  return Status::Ok();
}

Status PositionalFile::SyncAndClose() {
  if (fd_ < 0) return Status::FailedPrecondition(path_ + ": closed");
  Status s;
  if (::fsync(fd_) != 0) s = Status::IoError("fsync " + path_ + ": " + ErrnoString(errno));
  if (::close(fd_) != 0 && s.ok()) s = Status::IoError("closing " + path_ + ": " + ErrnoString(errno));
  fd_ = -1;
  return s;
}

}  // namespace eft::trainer
