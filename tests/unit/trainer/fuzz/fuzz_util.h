// A small deterministic mutation fuzzer for the trainer's file parsers (parser_fuzz_test.cc):
// seeded mutations of valid seed files, a time and iteration budget, and a watchdog that turns an
// input which takes too long (a hang) into a failure that saves the input.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace eft::trainer::fuzz {

// EFT_FUZZ_SECONDS (per target) and EFT_FUZZ_ITERATIONS extend or shorten a run; EFT_FUZZ_SEED
// replays another sequence.
struct Budget {
  double seconds = 20;
  int64_t iterations = 5'000'000;
  uint64_t seed = 20261124;
  double per_input_seconds = 5;

  static Budget FromEnv() {
    Budget b;
    if (const char* s = std::getenv("EFT_FUZZ_SECONDS")) b.seconds = std::atof(s);
    if (const char* s = std::getenv("EFT_FUZZ_ITERATIONS")) b.iterations = std::atoll(s);
    if (const char* s = std::getenv("EFT_FUZZ_SEED")) b.seed = std::strtoull(s, nullptr, 10);
    return b;
  }
};

// Byte-level mutations of the kinds AFL-style fuzzers use, plus values that stress parsers of
// JSON headers (huge and negative numbers, structural characters, deep nesting).
class Mutator {
 public:
  Mutator(std::vector<std::string> seeds, uint64_t seed) : seeds_(std::move(seeds)), rng_(seed) {}

  std::string Next() {
    std::string b = seeds_[Pick(seeds_.size())];
    const int rounds = 1 + static_cast<int>(Pick(4));
    for (int r = 0; r < rounds; ++r) MutateOnce(&b);
    return b;
  }

 private:
  uint64_t Pick(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  void MutateOnce(std::string* b) {
    static const char* kTokens[] = {"{", "}", "[", "]", "\"", ":", ",", "-1", "0", "null", "true", "1e308",
                                    "18446744073709551615", "9223372036854775808", "-9223372036854775809",
                                    "4294967296", "\"\"", "{}", "[]", "\\u0000", "\\ud800", "\xff", "\xc3(",
                                    "[[[[[[[[[[[[[[[[", "\"F32\"", "\"BF16\"", "\"Q7\"", "\"BPE\"", "\"Regex\"",
                                    "\"Sequence\"", "(?:", "\\\\", "*", "+"};
    const uint64_t n = b->size();
    switch (Pick(8)) {
      case 0:  // bit flips
        if (n) (*b)[Pick(n)] ^= static_cast<char>(1 << Pick(8));
        break;
      case 1:  // truncation
        b->resize(Pick(n + 1));
        break;
      case 2:  // a random byte inserted
        b->insert(b->begin() + static_cast<std::ptrdiff_t>(Pick(n + 1)), static_cast<char>(Pick(256)));
        break;
      case 3:  // a token inserted
        b->insert(Pick(n + 1), kTokens[Pick(std::size(kTokens))]);
        break;
      case 4: {  // a token overwrites a span
        const std::string t = kTokens[Pick(std::size(kTokens))];
        if (n) b->replace(Pick(n), Pick(8), t);
        break;
      }
      case 5: {  // splice: this input's head, another seed's tail
        const std::string& other = seeds_[Pick(seeds_.size())];
        *b = b->substr(0, Pick(n + 1)) + other.substr(Pick(other.size() + 1));
        break;
      }
      case 6: {  // a chunk duplicated
        if (!n) break;
        const uint64_t at = Pick(n), len = 1 + Pick(std::min<uint64_t>(64, n - at));
        b->insert(Pick(n + 1), b->substr(at, len));
        break;
      }
      default: {  // a digit rewritten (offsets, shapes, ids)
        for (int k = 0; k < 4 && n; ++k) {
          const uint64_t at = Pick(n);
          if ((*b)[at] >= '0' && (*b)[at] <= '9') (*b)[at] = static_cast<char>('0' + Pick(10));
        }
        break;
      }
    }
  }

  std::vector<std::string> seeds_;
  std::mt19937_64 rng_;
};

// Watches the input being run: one that is still running after the per-input bound is written to
// `dump_path` and the process aborts with a message (a hang must fail the test, not stall it).
class Watchdog {
 public:
  Watchdog(std::string dump_path, double limit_s) : dump_path_(std::move(dump_path)), limit_s_(limit_s) {
    thread_ = std::thread([this] { Watch(); });
  }
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  void Begin(const std::string* input) {
    std::lock_guard<std::mutex> lock(mu_);
    input_ = input;
    started_ = std::chrono::steady_clock::now();
  }
  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    input_ = nullptr;
  }

 private:
  void Watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mu_);
      if (!input_) continue;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      if (s < limit_s_) continue;
      std::ofstream(dump_path_, std::ios::binary) << *input_;
      std::fprintf(stderr, "FUZZ HANG: one input ran %.1f s (limit %.1f s); saved to %s\n", s, limit_s_,
                   dump_path_.c_str());
      std::abort();
    }
  }

  std::string dump_path_;
  double limit_s_;
  std::mutex mu_;
  const std::string* input_ = nullptr;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace eft::trainer::fuzz
