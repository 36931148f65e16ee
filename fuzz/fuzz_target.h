// What every fuzz target of fuzz/ shares (docs/fuzzing.md). A target defines LLVMFuzzerTestOneInput
// over one parser of outside input; the same source is linked two ways: with libFuzzer under
// ASan+UBSan (`make fuzz`, build-fuzz/) and with replay_main.cc into the normal build, where ctest
// replays the seed and regression corpora (fuzz_replay.<target>).
//
// A parser may refuse an input with a Status (that is its job); what a target reports is everything
// else: a crash, a sanitizer finding, an exception escaping the parser, a broken invariant
// (FUZZ_CHECK), or a hang (libFuzzer's -timeout).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

// An invariant the parser promises (a round trip, a bound): abort with the reason when broken, so
// both libFuzzer and the replay driver report the input.
#define FUZZ_CHECK(cond, what)                                                                  \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,   \
                   std::string(what).c_str());                                                  \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace eft::fuzz {

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// For parsers that read only from a path: one in-memory file (memfd) per process, rewritten for each
// input and named by /proc/self/fd/N, so a run touches no disk.
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("eft-fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& Write(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace eft::fuzz
