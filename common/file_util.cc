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

}  // namespace eft
