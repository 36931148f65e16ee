// Job spec parsing, validation and defaults.
//
// JSON -> JobSpec takes two passes. First a walk over the JSON against the message descriptors
// checks every key and every type and stops at the first problem, naming its full path and, for an
// unknown key, the field the user probably meant. The walk also rewrites the document into a
// canonical form (proto field names, nulls dropped, 64-bit integers as strings) so that protobuf's
// JSON parser, which then does the actual mapping, cannot fail on anything a user wrote: its own
// errors ("Expected : between key:value pair.") say nothing about where the problem is.
//
// NormalizeJobSpec reports the FIRST error only, checking fields in the order spec.proto declares
// them (nested messages depth-first). One error at a time keeps messages short, and a fixed order
// makes the reported error deterministic for users and tests alike.
#include "spec/job_spec.h"
#include "spec/spec_messages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include "common/rank_protocol.h"
#include "common/yaml_json.h"

namespace eft::spec {
namespace internal {

using nlohmann::json;

std::string Quote(const std::string& s) {
  // Long values would drown the message; the start is enough to recognise one's own input.
  std::string shown = s.size() > 60 ? s.substr(0, 57) + "..." : s;
  return json(shown).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Doubles as a YAML user wrote them: shortest round-trip text, YAML spellings for non-finite ones.
std::string FormatDouble(double d) {
  if (std::isnan(d)) return ".nan";
  if (std::isinf(d)) return d < 0 ? "-.inf" : ".inf";
  return json(d).dump();
}

Status Invalid(const std::string& message) { return Status::InvalidArgument(message); }

Status CheckRange(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) return Invalid(field + " (" + std::to_string(v) + ") must be >= " + std::to_string(lo));
  if (v > hi) return Invalid(field + " (" + std::to_string(v) + ") must be <= " + std::to_string(hi));
  return Status::Ok();
}

}  // namespace internal

using internal::CheckRange;
using internal::FormatDouble;
using internal::Invalid;
using internal::Quote;

namespace {

namespace pb = google::protobuf;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Describing values in messages.

std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "boolean true" : "boolean false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + v.dump();
    case json::value_t::number_float: return "number " + FormatDouble(v.get<double>());
    case json::value_t::string: return "string " + Quote(v.get<std::string>());
    case json::value_t::array: return "a list";
    case json::value_t::object: return "a mapping";
    default: return "an unsupported value";
  }
}

// Proto3 strings must be UTF-8, and nlohmann throws when dumping anything else.
bool IsUtf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

Status TypeError(const std::string& path, const std::string& expected, const json& got,
                 const std::string& hint = "") {
  return Status::InvalidArgument(path + ": expected " + expected + ", got " + Describe(got) + hint);
}

std::string FieldList(const pb::Descriptor* d) {
  std::string out;
  for (int i = 0; i < d->field_count(); ++i) out += (i ? ", " : "") + d->field(i)->name();
  return out;
}

// ---------------------------------------------------------------------------------------------
// "Did you mean ...?" for unknown keys.

// Lowercase without separators, so that maxSeqLen, max_seq_len and max-seq-len compare equal.
std::string Fold(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Names other tools (transformers, torchrun, Kubernetes) use for our fields. Edit distance cannot
// connect "learning_rate" to "lr", yet that is exactly the mistake people make.
const std::map<std::string, std::string>& Aliases() {
  static const auto* kAliases = new std::map<std::string, std::string>{
      {"learningrate", "lr"},          {"batchsize", "global_batch_size"},
      {"numepochs", "epochs"},         {"numtrainepochs", "epochs"},
      {"maxlength", "max_seq_len"},    {"seqlen", "max_seq_len"},
      {"gpus", "gpus_per_node"},       {"nprocpernode", "gpus_per_node"},
      {"gradclip", "max_grad_norm"},   {"clipgradnorm", "max_grad_norm"},
      {"warmup", "warmup_ratio"},      {"scheduler", "schedule"},
      {"lrschedulertype", "type"},     {"gradientcheckpointing", "activation_checkpointing"},
      {"dtype", "precision"},          {"savesteps", "every_steps"},
      {"savetotallimit", "keep_last"}, {"maxretries", "max_restarts"},
      {"retries", "max_restarts"},     {"args", "command"},
      {"environment", "env"},          {"dataset", "data"},
      {"modelpath", "model"},          {"modelnameorpath", "model"},
      {"outputdir", "dir"},            {"node", "nodes"},
  };
  return *kAliases;
}

const pb::FieldDescriptor* FindFolded(const pb::Descriptor* d, const std::string& folded) {
  for (int i = 0; i < d->field_count(); ++i) {
    if (Fold(d->field(i)->name()) == folded) return d->field(i);
  }
  return nullptr;
}

// Returns the field name the user probably meant (a sibling: "lr"; elsewhere in the spec:
// "spec.training.lr"), or "" when nothing is close enough to be a useful guess.
std::string Suggest(const pb::Descriptor* d, const std::string& key) {
  std::string folded = Fold(key);
  auto alias = Aliases().find(folded);
  std::string target = alias != Aliases().end() ? Fold(alias->second) : folded;
  if (const auto* f = FindFolded(d, target)) return f->name();

  const pb::FieldDescriptor* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (int i = 0; i < d->field_count(); ++i) {
    size_t dist = EditDistance(folded, Fold(d->field(i)->name()));
    if (dist < best_distance) best = d->field(i), best_distance = dist;
  }
  // Up to a third of the word may be wrong: catches typos and "max_seq_length" without pairing
  // unrelated short names ("seed" and "type").
  if (best != nullptr && best_distance * 3 <= std::max<size_t>(folded.size(), 3)) return best->name();

  // The right name at the wrong level ("lr" directly under spec): search the whole spec.
  std::deque<std::pair<const pb::Descriptor*, std::string>> queue = {{v1::JobSpec::descriptor(), "spec"}};
  while (!queue.empty()) {
    auto [desc, path] = queue.front();
    queue.pop_front();
    if (desc != d) {
      if (const auto* f = FindFolded(desc, target)) return path + "." + f->name();
    }
    for (int i = 0; i < desc->field_count(); ++i) {
      const auto* f = desc->field(i);
      if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE && !f->is_map()) {
        queue.emplace_back(f->message_type(), path + "." + f->name());
      }
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// The checking walk: user JSON -> canonical JSON for protobuf's parser.

Status CheckMessage(const pb::Descriptor* d, const json& in, const std::string& path, json* out);

// For scalars written without quotes where a string belongs, e.g. `env: {DEBUG: 1}`.
std::string QuoteHint(const json& v) {
  if (!v.is_number() && !v.is_boolean()) return "";
  std::string text = v.is_number_float() ? FormatDouble(v.get<double>()) : v.dump();
  return " (write it in quotes to pass it as text: \"" + text + "\")";
}

Status CheckInteger(const pb::FieldDescriptor* f, const json& v, const std::string& path, json* out) {
  const auto type = f->cpp_type();
  const bool is64 = type == pb::FieldDescriptor::CPPTYPE_INT64 || type == pb::FieldDescriptor::CPPTYPE_UINT64;
  const bool is_unsigned = type == pb::FieldDescriptor::CPPTYPE_UINT32 || type == pb::FieldDescriptor::CPPTYPE_UINT64;
  // long double holds every int64 and uint64 exactly, so one range check serves all four types.
  long double value = 0;
  if (v.is_number_unsigned()) {
    value = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             v.get<double>() == std::trunc(v.get<double>())) {
    value = v.get<double>();  // YAML reads 1e3 as a float; it is still a whole number
  } else if (is64 && v.is_string() && !v.get<std::string>().empty() &&
             v.get<std::string>().find_first_not_of("-0123456789") == std::string::npos) {
    // Proto's JSON mapping writes 64-bit integers as strings; REST clients may send them so.
    size_t used = 0;
    try {
      value = std::stold(v.get<std::string>(), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.get<std::string>().size()) return TypeError(path, "an integer", v);
  } else {
    return TypeError(path, "an integer", v);
  }
  long double lo = 0, hi = 0;
  if (is_unsigned) {
    hi = is64 ? static_cast<long double>(std::numeric_limits<uint64_t>::max()) : std::numeric_limits<uint32_t>::max();
  } else {
    lo = is64 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min();
    hi = is64 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
  }
  if (value < lo || value > hi) {
    std::string shown = v.is_string() ? v.get<std::string>() : v.is_number_float() ? FormatDouble(v.get<double>()) : v.dump();
    return Status::InvalidArgument(path + ": " + shown + " does not fit in " +
                                   (is_unsigned ? "an unsigned " : "a ") + (is64 ? "64" : "32") + "-bit integer");
  }
  // Strings carry 64-bit values through protobuf's parser without a detour through double.
  std::string digits = v.is_string()          ? v.get<std::string>()
                       : v.is_number_unsigned() ? std::to_string(v.get<uint64_t>())
                       : v.is_number_integer()  ? std::to_string(v.get<int64_t>())
                                                : std::to_string(static_cast<int64_t>(value));
  *out = is64 ? json(digits) : json(static_cast<int64_t>(value));
  return Status::Ok();
}

// One value of field `f` (an element, for repeated fields and maps).
Status CheckValue(const pb::FieldDescriptor* f, const json& v, const std::string& path, json* out) {
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return CheckMessage(f->message_type(), v, path, out);
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (!v.is_string()) return TypeError(path, "a string", v, QuoteHint(v));
      if (!IsUtf8(v.get<std::string>())) {
        return Status::InvalidArgument(path + ": not valid UTF-8 text; save the file as UTF-8");
      }
      *out = v;
      return Status::Ok();
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      if (!v.is_boolean()) return TypeError(path, "true or false", v);
      *out = v;
      return Status::Ok();
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      if (!v.is_number()) return TypeError(path, "a number", v);
      // nlohmann would print a non-finite double as null, which protobuf reads as "unset".
      if (!std::isfinite(v.get<double>())) return TypeError(path, "a finite number", v);
      *out = v;
      return Status::Ok();
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumDescriptor* e = f->enum_type();
      if (v.is_string() && e->FindValueByName(v.get<std::string>()) != nullptr) {
        *out = v;
        return Status::Ok();
      }
      if (v.is_number_integer() && e->FindValueByNumber(v.get<int>()) != nullptr) {
        *out = v;
        return Status::Ok();
      }
      std::string names;
      for (int i = 0; i < e->value_count(); ++i) names += (i ? ", " : "") + e->value(i)->name();
      return TypeError(path, "one of " + names, v);
    }
    default:
      return CheckInteger(f, v, path, out);
  }
}

std::string ExpectedContainer(const pb::FieldDescriptor* f) {
  if (f->is_map()) return "a mapping of names to values";
  if (f->is_repeated()) {
    return f->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING ? "a list of strings (e.g. [python, train.py])"
                                                                  : "a list";
  }
  return "a mapping with fields " + FieldList(f->message_type());
}

Status CheckMessage(const pb::Descriptor* d, const json& in, const std::string& path, json* out) {
  if (!in.is_object()) {
    return TypeError(path, "a mapping with fields " + FieldList(d), in);
  }
  *out = json::object();
  std::map<std::string, std::string> seen;  // proto field name -> key as written
  for (const auto& [key, value] : in.items()) {
    const pb::FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) {
      for (int i = 0; i < d->field_count() && f == nullptr; ++i) {
        if (d->field(i)->json_name() == key) f = d->field(i);
      }
    }
    if (!IsUtf8(key)) return Status::InvalidArgument(path + ": a key is not valid UTF-8 text");
    std::string field_path = path + "." + key;
    if (f == nullptr) {
      std::string guess = Suggest(d, key);
      return Status::InvalidArgument(field_path + ": unknown field " +
                                     (guess.empty() ? "(fields here: " + FieldList(d) + ")"
                                                    : "(did you mean " + guess + "?)"));
    }
    auto [it, inserted] = seen.emplace(f->name(), key);
    if (!inserted) {
      return Status::InvalidArgument(field_path + ": given twice (also as " + path + "." + it->second +
                                     "); keep one");
    }
    if (value.is_null()) continue;  // `key:` with no value in YAML: leave the field unset

    json converted;
    if (f->is_map()) {
      if (!value.is_object()) return TypeError(field_path, ExpectedContainer(f), value);
      const pb::FieldDescriptor* value_field = f->message_type()->map_value();
      converted = json::object();
      for (const auto& [k, item] : value.items()) {
        if (!IsUtf8(k)) return Status::InvalidArgument(field_path + ": a key is not valid UTF-8 text");
        EFT_RETURN_IF_ERROR(CheckValue(value_field, item, field_path + "." + k, &converted[k]));
      }
    } else if (f->is_repeated()) {
      // PEFT spells "every linear layer" as a plain string: `target_modules: all-linear`.
      if (value.is_string() && f->full_name() == "eft.v1.LoraSpec.target_modules") {
        (*out)[f->name()] = json::array({value});
        continue;
      }
      if (!value.is_array()) return TypeError(field_path, ExpectedContainer(f), value);
      converted = json::array();
      for (size_t i = 0; i < value.size(); ++i) {
        json element;
        EFT_RETURN_IF_ERROR(CheckValue(f, value[i], field_path + "[" + std::to_string(i) + "]", &element));
        converted.push_back(std::move(element));
      }
    } else {
      EFT_RETURN_IF_ERROR(CheckValue(f, value, field_path, &converted));
    }
    (*out)[f->name()] = std::move(converted);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Validation helpers for NormalizeJobSpec. Each names the field, the bad value and the rule.

// `!(v >= lo)` rather than `v < lo` so that NaN fails too.
Status CheckAtLeast(const std::string& field, double v, double lo) {
  if (!std::isfinite(v) || !(v >= lo)) {
    return Invalid(field + " (" + FormatDouble(v) + ") must be a finite number >= " + FormatDouble(lo));
  }
  return Status::Ok();
}

Status CheckChoice(const std::string& field, std::string* value, const char* default_value,
                   std::initializer_list<const char*> choices) {
  if (value->empty()) *value = default_value;
  for (const char* c : choices) {
    if (*value == c) return Status::Ok();
  }
  std::string list;
  for (const char* c : choices) list += (list.empty() ? "" : ", ") + std::string(c);
  return Invalid(field + " (" + Quote(*value) + ") must be one of " + list);
}

Status CheckName(const std::string& name) {
  const std::string rule = "1-63 characters of a-z, 0-9 and '-', starting with a letter (e.g. \"qwen-sft\")";
  if (name.empty()) return Invalid("spec.name is required: " + rule);
  if (name.size() > 63) {
    return Invalid("spec.name (" + Quote(name) + ") is " + std::to_string(name.size()) +
                   " characters long; use at most 63");
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return Invalid("spec.name (" + Quote(name) + ") contains " + Quote(std::string(1, c)) +
                     "; use only lowercase letters a-z, digits 0-9 and '-'");
    }
  }
  if (!(name[0] >= 'a' && name[0] <= 'z')) {
    return Invalid("spec.name (" + Quote(name) + ") must start with a letter a-z");
  }
  if (name.back() == '-') return Invalid("spec.name (" + Quote(name) + ") must not end with '-'");
  return Status::Ok();
}

Status CheckEnv(const v1::JobSpec& spec) {
  // Map order is unspecified; sort so that the reported error does not depend on it.
  std::vector<std::string> names;
  for (const auto& [k, v] : spec.env()) names.push_back(k);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    bool valid = !n.empty() && !(n[0] >= '0' && n[0] <= '9');
    for (char c : n) {
      valid = valid && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!valid) {
      return Invalid("spec.env: " + Quote(n) +
                     " is not a valid variable name; use letters, digits and '_', not starting with a digit");
    }
    if (rank::IsReservedEnvName(n)) {
      return Invalid("spec.env." + n + ": the worker sets " + n +
                     " for every rank (RANK, WORLD_SIZE, MASTER_ADDR, CUDA_VISIBLE_DEVICES, EFT_*, ...); "
                     "remove it from spec.env");
    }
  }
  return Status::Ok();
}

// Drops unset proto3 `optional` fields that always_print_primitive_fields may print as zero (which
// would read back as "explicitly 0"), and turns 64-bit integers back into numbers for YAML.
void TidyJson(const pb::Message& m, json* out) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    auto it = out->find(f->name());
    if (it == out->end()) continue;
    if (f->is_repeated()) continue;
    if (f->has_presence() && !r->HasField(m, f)) {
      out->erase(it);
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      TidyJson(r->GetMessage(m, f), &*it);
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT64 && it->is_string()) {
      *it = r->GetInt64(m, f);
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64 && it->is_string()) {
      *it = r->GetUInt64(m, f);
    }
  }
}

}  // namespace

Result<v1::JobSpec> JobSpecFromJson(const json& value) {
  if (value.is_null()) return Status::InvalidArgument("spec: the document is empty; a job spec needs at least a name");
  json canonical;
  EFT_RETURN_IF_ERROR(CheckMessage(v1::JobSpec::descriptor(), value, "spec", &canonical));
  v1::JobSpec spec;
  auto status = pb::util::JsonStringToMessage(canonical.dump(), &spec, pb::util::JsonParseOptions());
  if (!status.ok()) {
    // The walk should have caught everything; if not, protobuf's words are better than nothing.
    return Status::InvalidArgument("spec: " + std::string(status.message()));
  }
  return spec;
}

Result<v1::JobSpec> ParseJobSpec(const std::string& text) {
  EFT_ASSIGN_OR_RETURN(json doc, YamlToJson(text));
  return JobSpecFromJson(doc);
}

Status NormalizeJobSpec(v1::JobSpec* spec) {
  const bool own_command = spec->command_size() > 0;
  EFT_RETURN_IF_ERROR(CheckName(spec->name()));
  if (!own_command && spec->model().empty()) {
    return Invalid("spec.model is required when spec.command is empty: set it to a Hugging Face model "
                   "directory (config.json, *.safetensors, tokenizer.json), or set spec.command to run your "
                   "own program");
  }

  v1::DataSpec* data = spec->mutable_data();
  if (!own_command && data->train().empty()) {
    return Invalid("spec.data.train is required when spec.command is empty: set it to a JSONL file of "
                   "training examples");
  }
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.format", data->mutable_format(), "auto",
                                  {"auto", "messages", "prompt_completion", "text", "alpaca", "pretokenized"}));
  if (data->chat_template().empty()) data->set_chat_template("auto");
  if (!data->has_max_seq_len()) data->set_max_seq_len(4096);
  EFT_RETURN_IF_ERROR(CheckRange("spec.data.max_seq_len", data->max_seq_len(), 16, 1048576));
  if (!data->has_packing()) data->set_packing(true);
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.loss_on", data->mutable_loss_on(), "assistant",
                                  {"assistant", "completion", "all"}));
  if (!data->has_train_on_eos()) data->set_train_on_eos(true);
  EFT_RETURN_IF_ERROR(CheckChoice("spec.data.on_bad_line", data->mutable_on_bad_line(), "error", {"error", "skip"}));
  EFT_RETURN_IF_ERROR(
      CheckChoice("spec.data.truncation", data->mutable_truncation(), "truncate", {"truncate", "drop"}));
  // Evaluation data (docs/data.md, "Evaluation").
  if (!std::isfinite(data->eval_fraction()) || !(data->eval_fraction() >= 0) || !(data->eval_fraction() < 1)) {
    return Invalid("spec.data.eval_fraction (" + FormatDouble(data->eval_fraction()) +
                   ") must be >= 0 and < 1 (the fraction of data.train held out for evaluation, e.g. 0.02)");
  }
  if (!data->eval().empty() && data->eval_fraction() > 0) {
    return Invalid("spec.data.eval and spec.data.eval_fraction are both set: evaluate on a file or on a held-out "
                   "part of data.train, not both");
  }

  v1::ResourceSpec* res = spec->mutable_resources();
  v1::NodeRange* nodes = res->mutable_nodes();
  if (!nodes->has_min()) nodes->set_min(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.nodes.min", nodes->min(), 1, 10000));
  if (!nodes->has_max()) nodes->set_max(nodes->min());
  if (nodes->max() < nodes->min()) {
    return Invalid("spec.resources.nodes.max (" + std::to_string(nodes->max()) +
                   ") must be >= spec.resources.nodes.min (" + std::to_string(nodes->min()) + ")");
  }
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.nodes.max", nodes->max(), 1, 10000));
  if (!res->has_gpus_per_node()) res->set_gpus_per_node(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.resources.gpus_per_node", res->gpus_per_node(), 1, 64));
  if (!res->has_grow()) res->set_grow(true);
  if (!res->has_resize_cooldown_seconds()) res->set_resize_cooldown_seconds(60);
  const double cooldown = res->resize_cooldown_seconds();
  // A week is far beyond any useful cooldown; the bound keeps the milliseconds the controller
  // computes from it well inside int64.
  if (!std::isfinite(cooldown) || !(cooldown >= 0) || cooldown > 604800) {
    return Invalid("spec.resources.resize_cooldown_seconds (" + FormatDouble(cooldown) +
                   ") must be >= 0 and <= 604800 (seconds between two resizes of the job)");
  }

  EFT_RETURN_IF_ERROR(CheckRange("spec.priority", spec->priority(), -1000000, 1000000));

  v1::TrainingSpec* t = spec->mutable_training();
  if (!t->has_epochs()) t->set_epochs(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.epochs", t->epochs(), 1, std::numeric_limits<int32_t>::max()));
  if (!t->has_global_batch_size()) t->set_global_batch_size(32);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.global_batch_size", t->global_batch_size(), 1,
                                 std::numeric_limits<int32_t>::max()));
  if (!t->has_micro_batch_size()) t->set_micro_batch_size(1);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.micro_batch_size", t->micro_batch_size(), 1,
                                 std::numeric_limits<int32_t>::max()));
  if (t->micro_batch_size() > t->global_batch_size()) {
    return Invalid("spec.training.micro_batch_size (" + std::to_string(t->micro_batch_size()) +
                   ") must be <= spec.training.global_batch_size (" + std::to_string(t->global_batch_size()) + ")");
  }
  if (!t->has_lr()) t->set_lr(1e-5);
  if (!std::isfinite(t->lr()) || !(t->lr() > 0)) {
    return Invalid("spec.training.lr (" + FormatDouble(t->lr()) + ") must be a finite number > 0 (e.g. 1e-5)");
  }
  v1::ScheduleSpec* sched = t->mutable_schedule();
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.schedule.type", sched->mutable_type(), "cosine",
                                  {"cosine", "linear", "constant"}));
  if (!std::isfinite(sched->warmup_ratio()) || !(sched->warmup_ratio() >= 0) || !(sched->warmup_ratio() < 1)) {
    return Invalid("spec.training.schedule.warmup_ratio (" + FormatDouble(sched->warmup_ratio()) +
                   ") must be >= 0 and < 1 (a fraction of the steps, e.g. 0.1)");
  }
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.schedule.min_lr", sched->min_lr(), 0));
  if (sched->min_lr() > t->lr()) {
    return Invalid("spec.training.schedule.min_lr (" + FormatDouble(sched->min_lr()) +
                   ") must be <= spec.training.lr (" + FormatDouble(t->lr()) + ")");
  }
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.weight_decay", t->weight_decay(), 0));
  if (!t->has_max_grad_norm()) t->set_max_grad_norm(1.0);
  EFT_RETURN_IF_ERROR(CheckAtLeast("spec.training.max_grad_norm", t->max_grad_norm(), 0));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.precision", t->mutable_precision(), "bf16", {"bf16", "fp32"}));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.activation_checkpointing", t->mutable_activation_checkpointing(),
                                  "full", {"none", "full"}));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.training.device", t->mutable_device(), "auto", {"auto", "cpu", "cuda"}));
  if (!t->has_seed()) t->set_seed(42);
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.max_steps", t->max_steps(), 0, std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckRange("spec.training.eval_every_steps", t->eval_every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  if (t->has_lora()) EFT_RETURN_IF_ERROR(NormalizeLora(t->mutable_lora()));

  EFT_RETURN_IF_ERROR(CheckChoice("spec.parallel.sharding", spec->mutable_parallel()->mutable_sharding(), "grad_op",
                                  {"full", "grad_op", "no_shard"}));

  v1::CheckpointSpec* ckpt = spec->mutable_checkpoint();
  if (!ckpt->has_every_steps()) ckpt->set_every_steps(200);
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.every_steps", ckpt->every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.full_every_steps", ckpt->full_every_steps(), 0,
                                 std::numeric_limits<int32_t>::max()));
  if (!ckpt->has_keep_last()) ckpt->set_keep_last(3);
  EFT_RETURN_IF_ERROR(CheckRange("spec.checkpoint.keep_last", ckpt->keep_last(), 1,
                                 std::numeric_limits<int32_t>::max()));
  EFT_RETURN_IF_ERROR(CheckChoice("spec.checkpoint.full_write", ckpt->mutable_full_write(), "parallel",
                                  {"parallel", "rank0"}));
  if (ckpt->merge_lora() && !t->has_lora()) {
    return Invalid("spec.checkpoint.merge_lora needs spec.training.lora: only a LoRA run has adapters to merge "
                   "(a full fine-tuning run's output is already a merged model)");
  }

  v1::FaultToleranceSpec* ft = spec->mutable_fault_tolerance();
  if (!ft->has_max_restarts()) ft->set_max_restarts(3);
  EFT_RETURN_IF_ERROR(CheckRange("spec.fault_tolerance.max_restarts", ft->max_restarts(), 0, 1000));
  if (!ft->has_stop_grace_seconds()) ft->set_stop_grace_seconds(30);
  double grace = ft->stop_grace_seconds();
  if (!std::isfinite(grace) || !(grace > 0) || grace > 3600) {
    return Invalid("spec.fault_tolerance.stop_grace_seconds (" + FormatDouble(grace) +
                   ") must be > 0 and <= 3600 (seconds between SIGTERM and SIGKILL)");
  }

  if (own_command && spec->command(0).empty()) {
    return Invalid("spec.command[0] is empty: it must name the program every rank runs (e.g. [python, train.py])");
  }
  return CheckEnv(*spec);
}

json JobSpecToJson(const v1::JobSpec& spec) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // GetJob shows every value that actually runs
  std::string text;
  // JobSpec has no Any fields, the only thing that makes printing fail.
  if (!pb::util::MessageToJsonString(spec, &text, options).ok()) return json::object();
  json out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return json::object();
  TidyJson(spec, &out);
  return out;
}

}  // namespace eft::spec
