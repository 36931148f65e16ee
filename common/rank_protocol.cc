#include "common/rank_protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace eft::rank {
namespace {

using nlohmann::json;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Reads the fields of one event object; remembers the first problem so that decoding stays a
// straight list of fields.
class FieldReader {
 public:
  FieldReader(const json& doc, std::string type) : doc_(doc), type_(std::move(type)) {}

  template <typename T>
  void Number(const char* key, T* out, bool required = false) {
    auto it = doc_.find(key);
    if (it == doc_.end() || it->is_null()) {
      if (required) Fail(std::string("\"") + key + "\" is missing");
      return;
    }
    if (!it->is_number()) return Fail(std::string("\"") + key + "\" is not a number");
    if constexpr (std::is_integral_v<T>) {
      // In T's range, or refused: a cast from outside it is undefined (a double) or wraps (an
      // integer), and a step of 1e20 or a negative checksum is no event a rank meant to send. A
      // fraction is cut off, as it always was ("step": 3.0 is step 3).
      using Limits = std::numeric_limits<T>;
      bool in_range;
      if (it->is_number_unsigned()) {
        in_range = it->get<uint64_t>() <= static_cast<uint64_t>(Limits::max());
      } else if (it->is_number_integer()) {
        const int64_t v = it->get<int64_t>();
        in_range = v >= static_cast<int64_t>(Limits::min()) && (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(Limits::max()));
      } else {
        const double d = it->get<double>();
        const double end = std::ldexp(1.0, Limits::digits);  // 2^63 for int64_t, 2^32 for uint32_t
        in_range = d > (Limits::is_signed ? -end - 1 : -1.0) && d < end;
      }
      if (!in_range) return Fail(std::string("\"") + key + "\" is out of range");
      *out = it->is_number_unsigned() ? static_cast<T>(it->get<uint64_t>())
             : it->is_number_integer() ? static_cast<T>(it->get<int64_t>())
                                       : static_cast<T>(it->get<double>());
    } else {
      *out = it->get<T>();
    }
  }

  // `required`: present and not empty, unless `may_be_empty`.
  void String(const char* key, std::string* out, bool required = false, bool may_be_empty = false) {
    auto it = doc_.find(key);
    if (it == doc_.end() || it->is_null()) {
      if (required) Fail(std::string("\"") + key + "\" is missing");
      return;
    }
    if (!it->is_string()) return Fail(std::string("\"") + key + "\" is not a string");
    *out = it->get<std::string>();
    if (required && !may_be_empty && out->empty()) Fail(std::string("\"") + key + "\" is empty");
  }

  void Bool(const char* key, bool* out) {
    auto it = doc_.find(key);
    if (it == doc_.end() || it->is_null()) return;
    if (!it->is_boolean()) return Fail(std::string("\"") + key + "\" is not a boolean");
    *out = it->get<bool>();
  }

  Status status() const { return status_; }

 private:
  void Fail(const std::string& what) {
    if (status_.ok()) status_ = Status::InvalidArgument(type_ + " event: " + what);
  }

  const json& doc_;
  std::string type_;
  Status status_;
};

// At most `max` (> 3) bytes with "..." marking the cut, never splitting a UTF-8 sequence
// (continuation bytes are 10xxxxxx).
std::string TruncateUtf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t end = max - 3;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "...";
}

// `line` without the source locations C++ libraries prefix their messages with, such as Gloo's
// "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] ": "[", a path with no spaces, ":", a line
// number, "]" and the spaces after it. People read end reasons; the location stays in the log.
std::string WithoutSourceLocations(const std::string& line) {
  std::string out;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == '[') {
      const size_t close = line.find(']', i);
      const size_t colon = close == std::string::npos ? std::string::npos : line.rfind(':', close);
      if (colon != std::string::npos && colon > i + 1) {
        const std::string path = line.substr(i + 1, colon - i - 1);
        const std::string number = line.substr(colon + 1, close - colon - 1);
        const bool is_path = path.find_first_of(" \t") == std::string::npos &&
                             (path.find('/') != std::string::npos || path.find(".c") != std::string::npos ||
                              path.find(".h") != std::string::npos);
        if (is_path && !number.empty() && number.find_first_not_of("0123456789") == std::string::npos) {
          i = close + 1;
          while (i < line.size() && line[i] == ' ') ++i;
          continue;
        }
      }
    }
    out += line[i++];
  }
  return out;
}

// An error's headline: its first line with text, trimmed, bounded, without source locations. The
// rest (a C++ stack, a Python traceback, LibTorch's "Exception raised from ..." frames) stays in the
// rank's log.
std::string ErrorHeadline(const std::string& message) {
  size_t begin = 0;
  while (begin < message.size()) {
    size_t end = message.find('\n', begin);
    if (end == std::string::npos) end = message.size();
    size_t a = begin, b = end;
    while (a < b && std::isspace(static_cast<unsigned char>(message[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(message[b - 1]))) --b;
    if (a < b) {
      std::string line = WithoutSourceLocations(message.substr(a, b - a));
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (!line.empty()) return TruncateUtf8(line, kMaxErrorMessageBytes);
    }
    begin = end + 1;
  }
  return "";
}

}  // namespace

ExitClass ClassifyExit(int exit_code, int signal) {
  if (signal != 0) return ExitClass::kSignal;
  switch (exit_code) {
    case ToInt(ExitCode::kSuccess): return ExitClass::kSuccess;
    case ToInt(ExitCode::kBadInput): return ExitClass::kBadInput;
    case ToInt(ExitCode::kStoppedOnRequest): return ExitClass::kStopped;
    case ToInt(ExitCode::kRendezvousPortBusy): return ExitClass::kPortBusy;
    case ToInt(ExitCode::kStorageFull): return ExitClass::kStorageFull;
    case ToInt(ExitCode::kOutOfMemory): return ExitClass::kOutOfMemory;
    case ToInt(ExitCode::kFenced): return ExitClass::kFenced;
    default: return ExitClass::kFailed;
  }
}

const char* ExitClassName(ExitClass c) {
  switch (c) {
    case ExitClass::kSuccess: return "success";
    case ExitClass::kBadInput: return "bad_input";
    case ExitClass::kStopped: return "stopped";
    case ExitClass::kPortBusy: return "port_busy";
    case ExitClass::kStorageFull: return "storage_full";
    case ExitClass::kOutOfMemory: return "out_of_memory";
    case ExitClass::kFenced: return "fenced";
    case ExitClass::kFailed: return "failed";
    case ExitClass::kSignal: return "signal";
  }
  return "failed";
}

const char* ExitCodeMeaning(int exit_code) {
  switch (exit_code) {
    case ToInt(ExitCode::kSuccess): return "finished";
    case ToInt(ExitCode::kBadInput): return "bad configuration or input";
    case ToInt(ExitCode::kStoppedOnRequest): return "stopped after saving a checkpoint";
    case ToInt(ExitCode::kRendezvousPortBusy): return "rendezvous port busy";
    case ToInt(ExitCode::kStorageFull): return "checkpoint storage full";
    case ToInt(ExitCode::kOutOfMemory): return "out of memory";
    case ToInt(ExitCode::kFenced): return "fenced off by a newer attempt";
    default: return "failed";
  }
}

bool IsReservedEnvName(std::string_view name) {
  static constexpr const char* kLauncherNames[] = {
      env::kRank,       env::kLocalRank,  env::kWorldSize,     env::kLocalWorldSize, env::kGroupRank,
      env::kRoleRank,   env::kMasterAddr, env::kMasterPort,    env::kRestartCount,   env::kRunId,
      env::kCudaVisibleDevices};
  if (name.substr(0, 4) == "EFT_") return true;
  return std::any_of(std::begin(kLauncherNames), std::end(kLauncherNames),
                     [&](const char* n) { return name == n; });
}

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kDataLoss:
      return ToInt(ExitCode::kBadInput);
    default:
      return ToInt(ExitCode::kFailure);
  }
}

std::string EventTypeName(const Event& event) {
  return std::visit(Overloaded{
                        [](const StepEvent&) { return std::string("step"); },
                        [](const CheckpointEvent&) { return std::string("checkpoint"); },
                        [](const CheckpointDeletedEvent&) { return std::string("checkpoint_deleted"); },
                        [](const CheckpointFailedEvent&) { return std::string("checkpoint_failed"); },
                        [](const ResumedEvent&) { return std::string("resumed"); },
                        [](const FinishedEvent&) { return std::string("finished"); },
                        [](const MemoryEvent&) { return std::string("memory"); },
                        [](const ErrorEvent&) { return std::string("error"); },
                        [](const NoValidCheckpointEvent&) { return std::string("no_valid_checkpoint"); },
                        [](const UnknownEvent& e) { return e.type; },
                        [](const EvalEvent&) { return std::string("eval"); },
                        [](const MemorySnapshotEvent&) { return std::string("memory_snapshot"); },
                        [](const MemorySnapshotRefusedEvent&) { return std::string("memory_snapshot_refused"); },
                        [](const ExportedEvent&) { return std::string("exported"); },
                    },
                    event);
}

std::string EncodeEvent(const Event& event) {
  json doc = {{"event", EventTypeName(event)}};
  std::visit(Overloaded{
                 [&](const StepEvent& e) {
                   doc.update({{"step", e.step},
                               {"loss", e.loss},
                               {"lr", e.lr},
                               {"grad_norm", e.grad_norm},
                               {"tokens", e.tokens},
                               {"tokens_per_s", e.tokens_per_s}});
                   if (e.total_steps > 0) doc["total_steps"] = e.total_steps;
                   if (e.seconds > 0) doc["seconds"] = e.seconds;
                   if (e.mfu > 0) doc["mfu"] = e.mfu;
                   for (auto [key, value] : {std::pair{"data_s", e.data_s}, std::pair{"compute_s", e.compute_s},
                                             std::pair{"comm_wait_s", e.comm_wait_s},
                                             std::pair{"optimizer_s", e.optimizer_s}}) {
                     if (value >= 0) doc[key] = value;
                   }
                 },
                 [&](const CheckpointEvent& e) {
                   doc.update({{"kind", e.kind}, {"step", e.step}, {"path", e.path}, {"bytes", e.bytes}});
                   if (e.seconds >= 0) doc["seconds"] = e.seconds;
                   if (e.stall_seconds >= 0) doc["stall_seconds"] = e.stall_seconds;
                 },
                 [&](const CheckpointDeletedEvent& e) { doc.update({{"path", e.path}, {"reason", e.reason}}); },
                 [&](const CheckpointFailedEvent& e) {
                   doc.update({{"kind", e.kind},
                               {"step", e.step},
                               {"reason", TruncateUtf8(e.reason, kMaxErrorMessageBytes)},
                               {"consecutive", e.consecutive},
                               {"storage_full", e.storage_full},
                               {"freed", e.freed}});
                 },
                 [&](const ResumedEvent& e) {
                   doc.update({{"step", e.step},
                               {"kind", e.kind},
                               {"path", e.path},
                               {"bytes", e.bytes},
                               {"verify_seconds", e.verify_seconds},
                               {"load_seconds", e.load_seconds}});
                 },
                 [&](const FinishedEvent& e) {
                   doc["step"] = e.step;
                   if (!e.merged_model.empty()) doc["merged_model"] = e.merged_model;
                 },
                 [&](const MemoryEvent& e) {
                   doc.update({{"rank", e.rank},
                               {"persistent_bytes", e.persistent_bytes},
                               {"peak_rss_bytes", e.peak_rss_bytes}});
                 },
                 [&](const ErrorEvent& e) {
                   doc.update({{"message", ErrorHeadline(e.message)}, {"exit_code", e.exit_code}});
                 },
                 [&](const NoValidCheckpointEvent& e) { doc.update({{"dir", e.dir}, {"skipped", e.skipped}}); },
                 [&](const UnknownEvent&) {},
                 [&](const EvalEvent& e) {
                   doc.update({{"step", e.step}, {"loss", e.loss}, {"tokens", e.tokens}, {"set", e.set},
                               {"index", e.index}});
                   if (e.seconds >= 0) doc["seconds"] = e.seconds;
                 },
                 [&](const MemorySnapshotEvent& e) {
                   doc.update({{"step", e.step},
                               {"rank", e.rank},
                               {"world_size", e.world_size},
                               {"path", e.path},
                               {"bytes", e.bytes},
                               {"crc32c", e.crc32c}});
                   if (e.seconds >= 0) doc["seconds"] = e.seconds;
                   if (e.stall_seconds >= 0) doc["stall_seconds"] = e.stall_seconds;
                 },
                 [&](const MemorySnapshotRefusedEvent& e) {
                   doc.update({{"step", e.step},
                               {"rank", e.rank},
                               {"node", e.node},
                               {"reason", TruncateUtf8(e.reason, kMaxErrorMessageBytes)}});
                 },
                 [&](const ExportedEvent& e) {
                   doc.update({{"step", e.step}, {"path", e.path}, {"type", e.type}, {"bytes", e.bytes}});
                   if (e.seconds >= 0) doc["seconds"] = e.seconds;
                 },
             },
             event);
  // Paths and reasons are the only free text; replace what is not UTF-8 rather than throw.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<Event> DecodeEvent(std::string_view line) {
  json doc = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Status::InvalidArgument("event: not a JSON object");
  auto type_it = doc.find("event");
  if (type_it == doc.end() || !type_it->is_string()) {
    return Status::InvalidArgument("event: no string \"event\" naming its type");
  }
  const std::string type = type_it->get<std::string>();
  FieldReader r(doc, type);
  Event out;
  if (type == "step") {
    StepEvent e;
    r.Number("step", &e.step, /*required=*/true);
    r.Number("total_steps", &e.total_steps);
    r.Number("loss", &e.loss);
    r.Number("lr", &e.lr);
    r.Number("grad_norm", &e.grad_norm);
    r.Number("tokens", &e.tokens);
    r.Number("tokens_per_s", &e.tokens_per_s);
    r.Number("seconds", &e.seconds);
    r.Number("mfu", &e.mfu);
    r.Number("data_s", &e.data_s);
    r.Number("compute_s", &e.compute_s);
    r.Number("comm_wait_s", &e.comm_wait_s);
    r.Number("optimizer_s", &e.optimizer_s);
    out = e;
  } else if (type == "checkpoint") {
    CheckpointEvent e;
    r.String("kind", &e.kind);
    r.Number("step", &e.step, /*required=*/true);
    r.String("path", &e.path, /*required=*/true);
    r.Number("bytes", &e.bytes);
    r.Number("seconds", &e.seconds);
    r.Number("stall_seconds", &e.stall_seconds);
    out = e;
  } else if (type == "checkpoint_deleted") {
    CheckpointDeletedEvent e;
    r.String("path", &e.path, /*required=*/true);
    r.String("reason", &e.reason);
    out = e;
  } else if (type == "checkpoint_failed") {
    CheckpointFailedEvent e;
    r.String("kind", &e.kind);
    r.Number("step", &e.step, /*required=*/true);
    r.String("reason", &e.reason);
    r.Number("consecutive", &e.consecutive);
    r.Bool("storage_full", &e.storage_full);
    r.Number("freed", &e.freed);
    out = e;
  } else if (type == "resumed") {
    ResumedEvent e;
    r.Number("step", &e.step, /*required=*/true);
    r.String("kind", &e.kind);
    r.String("path", &e.path);
    r.Number("bytes", &e.bytes);
    r.Number("verify_seconds", &e.verify_seconds);
    r.Number("load_seconds", &e.load_seconds);
    out = e;
  } else if (type == "finished") {
    FinishedEvent e;
    r.Number("step", &e.step);
    r.String("merged_model", &e.merged_model);
    out = e;
  } else if (type == "memory") {
    MemoryEvent e;
    r.Number("rank", &e.rank);
    r.Number("persistent_bytes", &e.persistent_bytes);
    r.Number("peak_rss_bytes", &e.peak_rss_bytes);
    out = e;
  } else if (type == "error") {
    ErrorEvent e;
    // Present, but it may say nothing: a blank message reads as "" (its headline), and a rank whose
    // error had no text sends "" (EncodeEvent of a blank message), which must not lose the event
    // and its exit code (found by fuzz/rank_event_fuzz.cc).
    r.String("message", &e.message, /*required=*/true, /*may_be_empty=*/true);
    r.Number("exit_code", &e.exit_code);
    e.message = ErrorHeadline(e.message);
    out = e;
  } else if (type == "no_valid_checkpoint") {
    NoValidCheckpointEvent e;
    r.String("dir", &e.dir);
    r.Number("skipped", &e.skipped);
    out = e;
  } else if (type == "eval") {
    EvalEvent e;
    r.Number("step", &e.step, /*required=*/true);
    r.Number("loss", &e.loss, /*required=*/true);
    r.Number("tokens", &e.tokens);
    r.Number("seconds", &e.seconds);
    r.String("set", &e.set);
    r.Number("index", &e.index);
    out = e;
  } else if (type == "memory_snapshot") {
    MemorySnapshotEvent e;
    r.Number("step", &e.step, /*required=*/true);
    r.Number("rank", &e.rank, /*required=*/true);
    r.Number("world_size", &e.world_size, /*required=*/true);
    r.String("path", &e.path, /*required=*/true);
    r.Number("bytes", &e.bytes, /*required=*/true);
    r.Number("crc32c", &e.crc32c, /*required=*/true);
    r.Number("seconds", &e.seconds);
    r.Number("stall_seconds", &e.stall_seconds);
    out = e;
  } else if (type == "memory_snapshot_refused") {
    MemorySnapshotRefusedEvent e;
    r.Number("step", &e.step, /*required=*/true);
    r.Number("rank", &e.rank);
    r.String("node", &e.node);
    r.String("reason", &e.reason);
    out = e;
  } else if (type == "exported") {
    ExportedEvent e;
    r.Number("step", &e.step);
    r.String("path", &e.path, /*required=*/true);
    r.String("type", &e.type);
    r.Number("bytes", &e.bytes);
    r.Number("seconds", &e.seconds);
    out = e;
  } else {
    out = UnknownEvent{type};
  }
  EFT_RETURN_IF_ERROR(r.status());
  return out;
}

}  // namespace eft::rank
