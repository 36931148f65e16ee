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
#include <filesystem>
#include <fstream>
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

// For parsers that read a model directory: one directory per process (in /dev/shm where there is
// one), removed when the process exits (keep the instance static); Write puts an input under a name.
class TempDir {
 public:
  explicit TempDir(const char* name) {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    std::string pattern = (base / (std::string("eft-fuzz-") + name + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    dir_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `bytes` as the file `name` in the directory; returns the directory.
  const std::string& Write(const char* name, std::string_view bytes) {
    std::ofstream out(std::filesystem::path(dir_) / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    FUZZ_CHECK(out.good(), std::string("cannot write ") + name + " in " + dir_);
    return dir_;
  }

 private:
  std::string dir_;
};

}  // namespace eft::fuzz
