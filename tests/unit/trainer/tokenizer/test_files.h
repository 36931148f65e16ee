// Small helpers for tokenizer tests: temporary directories, files, running a command.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "tests/unit/common/read_file_test_util.h"

namespace eft::testing {

inline std::string SourceDir() {
  const char* s = std::getenv("EFT_SOURCE_DIR");
  return s ? s : EFT_SOURCE_DIR_DEFAULT;
}

inline std::string MakeTempDir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  char* made = mkdtemp(pattern.data());
  return made ? std::string(made) : std::string();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string ReadFile(const std::string& path) { return file_testing::ReadFileOrEmpty(path); }

// Exit code of `sh -c cmd`.
inline int RunCommand(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace eft::testing
