// Job specs (spec/job_spec.h): YAML or JSON text from eftctl, the REST API and eft-train --config.
// A spec that parses and normalizes must survive the trip the controller makes it take: written as
// JSON (JobSpecToJson, what it stores and hands every rank as EFT_JOB_SPEC), read back, normalized
// again, to the same JSON.
#include "fuzz/fuzz_target.h"
#include "spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // specs are small; the YAML reader is not what is measured here
  auto spec = eft::spec::ParseJobSpec(eft::fuzz::AsString(data, size));
  if (!spec.ok()) {
    FUZZ_CHECK(!spec.status().message().empty(), "a refusal without a message");
    return 0;
  }
  if (!eft::spec::NormalizeJobSpec(&*spec).ok()) return 0;
  eft::spec::EvalSetNames(*spec);
  eft::spec::MemorySnapshotInterval(spec->checkpoint().memory_every_steps());
  const nlohmann::json json = eft::spec::JobSpecToJson(*spec);
  const std::string text = json.dump();
  auto again = eft::spec::ParseJobSpec(text);
  FUZZ_CHECK(again.ok(), "a normalized spec does not parse back: " + text + ": " + again.status().message());
  const eft::Status normalized = eft::spec::NormalizeJobSpec(&*again);
  FUZZ_CHECK(normalized.ok(), "a normalized spec does not normalize again: " + text + ": " + normalized.message());
  FUZZ_CHECK(eft::spec::JobSpecToJson(*again) == json, "normalizing twice changed the spec: " + text);
  return 0;
}
