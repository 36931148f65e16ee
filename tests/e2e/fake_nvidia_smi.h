// A stand-in for nvidia-smi, for workers that should believe they run on a GPU node.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace eft::testing {

// A stand-in for nvidia-smi: one GPU (index 0), 42 % busy, 2 GiB of 16 GiB used.
class FakeNvidiaSmi {
 public:
  FakeNvidiaSmi() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eft-fake-nvidia-smi-XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    path_ = dir_ + "/nvidia-smi";
    std::ofstream(path_) << "#!/bin/sh\nprintf '0, GPU-fake-0, 42, 2048, 16384\\n'\n";
    ::chmod(path_.c_str(), 0755);
  }
  ~FakeNvidiaSmi() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

}  // namespace eft::testing
