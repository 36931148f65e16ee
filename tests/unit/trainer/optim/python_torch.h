// Runs small reference computations in PyTorch (tests/util/torch_python.h), the implementation our
// optimizer code promises to agree with. Tensors travel as raw little-endian fp32 files in a scratch dir.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "tests/util/torch_python.h"

namespace eft::trainer::testing {

inline const std::string kPython = eft::testing::TorchPython();

struct CommandResult {
  int status = -1;
  std::string output;
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  r.status = ::pclose(pipe);
  return r;
}

// Empty when python3 with torch is usable; otherwise why not (for a loud GTEST_SKIP).
inline std::string PythonTorchMissing() {
  static const std::string why = [] {
    CommandResult r = RunCommand(kPython + " -c 'import torch; print(torch.__version__)'");
    if (r.status != 0) return kPython + " cannot import torch (run scripts/install-deps.sh): " + r.output;
    return std::string();
  }();
  return why;
}

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "eft_optim_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteTensor(const std::string& path, const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(c.data_ptr<float>()), static_cast<std::streamsize>(c.numel() * 4));
}

inline at::Tensor ReadTensor(const std::string& path, int64_t numel) {
  at::Tensor t = at::empty({numel}, at::kFloat);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(numel * 4));
  if (!in || in.gcount() != numel * 4) throw std::runtime_error("short read from " + path);
  return t;
}

// Writes `script` into `dir` and runs it with the dir as its only argument.
inline CommandResult RunPython(const ScratchDir& dir, const std::string& script) {
  std::ofstream(dir / "script.py") << script;
  return RunCommand(std::string(kPython) + " " + dir / "script.py" + " " + dir.str());
}

// max over elements of |a - b| / max(|b|, floor): relative error with an absolute floor for values
// near zero, where relative error means nothing.
inline double MaxRelDiff(const at::Tensor& a, const at::Tensor& b, double floor = 1e-30) {
  at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
  return ((ad - bd).abs() / bd.abs().clamp_min(floor)).max().item<double>();
}

}  // namespace eft::trainer::testing
