// A checkpoint's own files (trainer/checkpoint/): the COMMITTED manifest and trainer_state.json,
// read on every resume from storage anyone may have touched. The same JSON goes to both readers;
// whatever one accepts must be written back (ToJson) as something it reads back the same.
#include "fuzz/fuzz_target.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  if (auto m = eft::trainer::Manifest::FromJson(j); m.ok()) {
    m->total_bytes();
    m->writer.ToString();
    const nlohmann::json written = m->ToJson();
    auto again = eft::trainer::Manifest::FromJson(written);
    FUZZ_CHECK(again.ok(), "its own manifest is refused: " + written.dump() + ": " + again.status().message());
    FUZZ_CHECK(again->ToJson() == written, "the manifest does not read back the same: " + written.dump());
  }
  if (auto s = eft::trainer::TrainerState::FromJson(j); s.ok()) {
    s->config_hash();
    const nlohmann::json written = s->ToJson();
    auto again = eft::trainer::TrainerState::FromJson(written);
    FUZZ_CHECK(again.ok(), "its own trainer_state.json is refused: " + written.dump() + ": " + again.status().message());
    FUZZ_CHECK(again->ToJson().dump() == written.dump(), "trainer_state.json does not read back the same: " + written.dump());
    // A resume compares the saved record with the current run's, both ways.
    static const nlohmann::json kCurrent = {{"model", "/m"}, {"training.global_batch_size", 32}, {"seed", 1}};
    (void)eft::trainer::CheckCompatible(s->compat, kCurrent);
    (void)eft::trainer::CheckCompatible(kCurrent, s->compat);
  }
  return 0;
}
