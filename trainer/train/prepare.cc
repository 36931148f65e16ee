#include "trainer/train/prepare.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>

#include "common/rank_protocol.h"
#include "trainer/data/packing.h"
#include "trainer/data/sampler.h"
#include "trainer/model/model_config.h"
#include "trainer/train/training_data.h"

namespace eft::trainer {
namespace {

// A bar redrawn in place on a terminal; elsewhere (logs) a line every 10%.
class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}
  void operator()(int64_t done, int64_t total) {
    if (total <= 0) return;
    const int percent = static_cast<int>(100 * done / total);
    const double mb = static_cast<double>(done) / 1e6;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (tty_) {
      const int filled = percent * 30 / 100;
      std::fprintf(stderr, "\rtokenizing [%.*s%*s] %3d%%  %.1f MB  %.1f MB/s", filled, "##############################",
                   30 - filled, "", percent, mb, secs > 0 ? mb / secs : 0.0);
      if (done >= total) std::fprintf(stderr, "\n");
    } else if (percent / 10 > last_decile_ || done >= total) {
      last_decile_ = percent / 10;
      std::fprintf(stderr, "tokenizing: %d%% (%.1f MB, %.1f s)\n", percent, mb, secs);
    }
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  int last_decile_ = -1;
};

double Percent(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0; }

}  // namespace

int RunPrepare(const TrainConfig& c) {
  const v1::DataSpec& data = c.spec.data();
  const v1::TrainingSpec& training = c.spec.training();
  auto model = ModelConfig::FromHfDir(c.spec.model());
  if (!model.ok()) {
    std::fprintf(stderr, "eft-train prepare: %s\n", model.status().message().c_str());
    return rank::ExitCodeFor(model.status());
  }
  auto text = LoadTextPipeline(c);
  if (!text.ok()) {
    std::fprintf(stderr, "eft-train prepare: %s\n", text.status().message().c_str());
    return rank::ExitCodeFor(text.status());
  }
  Progress progress;
  auto prepared = PrepareTrainingData(c, model->vocab_size, text->pipeline(),
                                      [&](int64_t done, int64_t total) { progress(done, total); });
  if (!prepared.ok()) {
    std::fprintf(stderr, "eft-train prepare: %s\n", prepared.status().message().c_str());
    return rank::ExitCodeFor(prepared.status());
  }
  const SftBuildStats& st = prepared->stats;
  std::printf("data              %s\n", data.train().c_str());
  // One line per file only where the files differ (a directory of shards reads as one).
  std::set<std::string> formats, kinds;
  for (const auto& [file, format] : st.formats) formats.insert(format);
  for (const auto& [file, kind] : st.kinds) kinds.insert(kind);
  if (st.formats.size() > 1) {
    std::string listed;
    for (const auto& k : kinds) listed += (listed.empty() ? "" : ", ") + k;
    std::printf("files             %zu%s%s%s\n", st.formats.size(), listed.empty() ? "" : " (", listed.c_str(),
                listed.empty() ? "" : ")");
  }
  if (formats.size() == 1) {
    std::printf("format            %s\n", formats.begin()->c_str());
  } else {
    for (const auto& [file, format] : st.formats) std::printf("format            %s (%s)\n", format.c_str(), file.c_str());
  }
  const bool rows = kinds.count("jsonl") == 0 && !kinds.empty();
  std::printf("%s %lld\n", rows ? "rows             " : "lines            ", static_cast<long long>(st.lines));
  std::printf("examples          %lld\n", static_cast<long long>(st.examples));
  std::printf("  bad %s       %lld skipped%s%s\n", rows ? "rows " : "lines", static_cast<long long>(st.skipped_bad),
              st.first_bad.empty() ? "" : ", first: ", st.first_bad.c_str());
  std::printf("  truncated       %lld (to %lld tokens)\n", static_cast<long long>(st.truncated),
              static_cast<long long>(data.max_seq_len()));
  std::printf("  dropped         %lld (too long, truncation: drop)\n", static_cast<long long>(st.dropped_long));
  std::printf("  nothing trained %lld skipped\n", static_cast<long long>(st.no_trained));
  std::printf("tokens            %lld (%.1f%% trained, loss_on %s)\n", static_cast<long long>(st.tokens),
              Percent(st.trained_tokens, st.tokens), data.loss_on().c_str());
  int64_t sequences = prepared->documents.size();
  if (data.packing() && sequences > 0) {
    PackingStats packing;
    TokenDataset packed = PackDataset(prepared->documents, data.max_seq_len(), &packing);
    sequences = packed.size();
    std::printf("packing           %lld sequences of up to %lld tokens, %.1f%% of their tokens real\n",
                static_cast<long long>(sequences), static_cast<long long>(data.max_seq_len()),
                100 * packing.efficiency());
  } else {
    std::printf("packing           off: %lld sequences\n", static_cast<long long>(sequences));
  }
  if (sequences > 0) {
    GlobalSampler sampler(sequences, training.global_batch_size(), static_cast<uint64_t>(training.seed()));
    std::printf("steps             %lld per epoch (global batch %lld), %lld for %lld epochs\n",
                static_cast<long long>(sampler.steps_per_epoch()), static_cast<long long>(training.global_batch_size()),
                static_cast<long long>(sampler.steps_per_epoch() * training.epochs()),
                static_cast<long long>(training.epochs()));
  }
  std::printf("token cache       %s (%s)\n", prepared->cache_file.c_str(),
              prepared->from_cache ? "reused" : "built now");
  return 0;
}

}  // namespace eft::trainer
