// Encode throughput of eft's tokenizer on a corpus ({"text": ...} per line), single-threaded:
// every document encoded one by one (as the data pipeline does), then the whole corpus as one
// string. Prints one JSON line, comparable with tests/reference/hf_tokenize.mjs --bench.
//
//   tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [repeats]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [repeats]\n");
    return 2;
  }
  int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  auto tokenizer = eft::trainer::LoadTokenizer(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().message().c_str());
    return 2;
  }
  std::ifstream in(argv[2]);
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
    bytes += texts.back().size();
  }
  using Clock = std::chrono::steady_clock;
  // Like Hugging Face's, our word cache warms up on first use; the best of `repeats` runs is
  // reported for both ways of timing, the first (cold) run separately.
  double cold = 0, best_doc = 1e30, best_whole = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    tokens = 0;
    for (const std::string& t : texts) tokens += (*tokenizer)->Encode(t, false).ids.size();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r == 0) cold = s;
    best_doc = std::min(best_doc, s);
  }
  std::string whole;
  for (size_t i = 0; i < texts.size(); ++i) whole += (i ? "\n" : "") + texts[i];
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    auto e = (*tokenizer)->Encode(whole, false);
    best_whole = std::min(best_whole, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds_per_doc_cold\": %.4f, \"seconds_per_doc\": %.4f, "
              "\"seconds_whole\": %.4f, \"mb_per_s_per_doc\": %.2f}\n",
              bytes, tokens, cold, best_doc, best_whole, bytes / best_doc / 1e6);
  return 0;
}
