// PyTorch's wheel exports its own copy of parts of libstdc++ from libtorch.so (std::filesystem among
// them); a program that loads it before the system's libstdc++ has its std::filesystem calls bound to
// that copy, whose remove_all jumps through a weak symbol this libstdc++ does not define (a crash).
// cmake/EftTorch.cmake names libstdc++ first in every program; this checks that it holds for a test
// program like every other, where the crash used to happen.
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "trainer/parallel/device.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

TEST(LinkOrder, StdFilesystemIsTheSystemLibstdcxxsAndRemovesTrees) {
  // Referencing LibTorch keeps it linked, as in eft-train.
  EXPECT_FALSE(BuildAndDevices().empty());
  using RemoveAll = std::uintmax_t (*)(const fs::path&);
  const RemoveAll remove_all = &fs::remove_all;
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(remove_all), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  EXPECT_NE(std::string(info.dli_fname).find("libstdc++"), std::string::npos)
      << "std::filesystem::remove_all comes from " << info.dli_fname;

  const fs::path root = fs::temp_directory_path() / ("eft-link-order-" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f") << "x";
  EXPECT_EQ(fs::remove_all(root), 4u);  // root, a, a/b, a/b/f: the crash was here
  EXPECT_FALSE(fs::exists(root));
}

}  // namespace
}  // namespace eft::trainer
