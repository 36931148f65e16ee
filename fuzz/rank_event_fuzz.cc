// The rank protocol's events (common/rank_protocol.h): one line of JSON a rank writes on
// EFT_EVENTS_FD, read by the worker and the controller. Any line must decode or be refused; a
// decoded event must encode to a line that decodes to the same encoding (what the worker forwards
// is what the rank meant).
#include "common/rank_protocol.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line = eft::fuzz::AsString(data, size);
  auto event = eft::rank::DecodeEvent(line);
  if (!event.ok()) {
    FUZZ_CHECK(!event.status().message().empty(), "a refusal without a message");
    return 0;
  }
  const std::string encoded = eft::rank::EncodeEvent(*event);
  auto again = eft::rank::DecodeEvent(encoded);
  FUZZ_CHECK(again.ok(), "the encoding of a decoded event does not decode: " + encoded + ": " + again.status().message());
  FUZZ_CHECK(eft::rank::EventTypeName(*again) == eft::rank::EventTypeName(*event), encoded);
  FUZZ_CHECK(eft::rank::EncodeEvent(*again) == encoded, "encoding is not stable: " + encoded);
  return 0;
}
