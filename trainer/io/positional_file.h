// PositionalFile: writes at given offsets into a file that already exists (created by another
// process, maybe on another node), with the streaming writer's pacing: after every kChunkBytes
// written the kernel is told to start writing those ranges out (sync_file_range), and the ranges of
// the batch before are waited for and dropped from the page cache (POSIX_FADV_DONTNEED), so dirty
// memory stays at about two chunks however much is written (docs/checkpoints.md, "Write path").
// It never reads the file back and does not checksum: the caller checksums what it hands in.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace eft::trainer {

class PositionalFile {
 public:
  static constexpr uint64_t kChunkBytes = 64ull << 20;

  // Opens `path` for writing, without creating or truncating it. IoError when it cannot.
  static Result<std::unique_ptr<PositionalFile>> Open(const std::string& path, uint64_t chunk_bytes = kChunkBytes);
  ~PositionalFile();  // closes (without fsync)
  PositionalFile(const PositionalFile&) = delete;
  PositionalFile& operator=(const PositionalFile&) = delete;

  // All of [data, data + n) at `offset` (short writes retried). IoError naming the file and errno.
  Status Write(uint64_t offset, const void* data, uint64_t n);
  // fsync, then close. The data this process wrote is durable once it returns Ok.
  Status SyncAndClose();
  const std::string& path() const { return path_; }

 private:
  PositionalFile() = default;
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // [offset, length)

  std::string path_;
  int fd_ = -1;
  uint64_t chunk_bytes_ = kChunkBytes;
  Ranges started_;    // writeback started, not yet waited for
  Ranges pending_;    // written since the last writeback started
  uint64_t pending_bytes_ = 0;
};

}  // namespace eft::trainer
