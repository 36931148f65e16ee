// A model's config.json (trainer/model/model_config.h): the trainer allocates the model from these
// numbers, so whatever FromHfJson accepts must give finite sizes without overflow, and its own
// config.json (ToHfJson) must read back to the same architecture.
#include <cmath>

#include "fuzz/fuzz_target.h"
#include "trainer/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto config = eft::trainer::ModelConfig::FromHfJson(j);
  if (!config.ok()) {
    FUZZ_CHECK(!config.status().message().empty(), "a refusal without a message");
    return 0;
  }
  FUZZ_CHECK(config->NumParameters() > 0, j.dump());
  FUZZ_CHECK(std::isfinite(config->TrainingFlopsPerToken(config->max_position_embeddings)), j.dump());
  const nlohmann::json written = config->ToHfJson();
  auto again = eft::trainer::ModelConfig::FromHfJson(written);
  FUZZ_CHECK(again.ok(), "its own config.json is refused: " + written.dump() + ": " + again.status().message());
  FUZZ_CHECK(again->ToHfJson() == written, "config.json does not read back the same: " + written.dump());
  return 0;
}
