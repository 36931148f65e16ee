// The replay driver of a fuzz target in the normal build (docs/fuzzing.md): runs
// LLVMFuzzerTestOneInput once on every file of the directories (or files) given, in name order, so
// ctest replays each target's seed corpus and every input a fuzzer ever failed on. A failure is the
// target's own abort (a FUZZ_CHECK, a crash, an escaped exception); the file being run is printed
// first so the log names it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const auto& e : fs::recursive_directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {  // a target's regression folder exists once a fuzzer found something there
      std::fprintf(stderr, "replay: %s: absent, skipped\n", argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& f : files) {
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("replay: %zu inputs in %.2f s, none failed\n", files.size(), s);
  return files.empty() ? 1 : 0;  // an empty corpus is a mistake in the test's set-up
}
