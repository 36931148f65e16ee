#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace eft {
namespace {

Status ReadError(const std::string& path, int error) {
  std::string message = "cannot read " + path + ": " + std::strerror(error);
  switch (error) {
    case ENOENT:
    case ENOTDIR: return Status::NotFound(std::move(message));
    case EACCES:
    case EPERM: return Status::PermissionDenied(std::move(message));
    default: return Status::IoError(std::move(message));
  }
}

}  // namespace

Result<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadError(path, errno);
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      int error = errno;  // a directory opens but fails here with EISDIR
      ::close(fd);
      return ReadError(path, error);
    }
  }
  ::close(fd);
  return out;
}

Status WriteStringToFile(const std::string& path, const std::string& bytes) {
  auto fail = [&](int error) { return Status::IoError("cannot write " + path + ": " + std::strerror(error)); };
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int error = n < 0 ? errno : ENOSPC;  // a write of 0 bytes to a regular file: no room left
      ::close(fd);
      return fail(error);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return fail(errno);  // NFS reports a full server at close
  return Status::Ok();
}

namespace {

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Status::IoError(what + " " + path + ": " + std::strerror(errno));
}

Status FsyncOpened(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path);
  const Status s = ::fsync(fd) == 0 ? Status::Ok() : ErrnoStatus("fsync of", path);
  ::close(fd);
  return s;
}

}  // namespace

Status FsyncFile(const std::string& path) { return FsyncOpened(path, O_RDONLY); }

Status FsyncDir(const std::string& path) { return FsyncOpened(path, O_RDONLY | O_DIRECTORY); }

Status WriteFileDurably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  EFT_RETURN_IF_ERROR(WriteStringToFile(tmp, text));
  EFT_RETURN_IF_ERROR(FsyncFile(tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("renaming", tmp);
  return Status::Ok();
}

}  // namespace eft
