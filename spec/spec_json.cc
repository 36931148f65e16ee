// Job spec JSON: reading (JobSpecFromJson, ParseJobSpec) and printing (JobSpecToJson).
//
// JSON -> JobSpec takes two passes. First a walk over the JSON against the message descriptors
// checks every key and every type and stops at the first problem, naming its full path and, for an
// unknown key, the field the user probably meant. The walk also rewrites the document into a
// canonical form (proto field names, nulls dropped, 64-bit integers as strings) so that protobuf's
// JSON parser, which then does the actual mapping, cannot fail on anything a user wrote: its own
// errors ("Expected : between key:value pair.") say nothing about where the problem is.
#include "spec/job_spec.h"
#include "spec/spec_messages.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include "common/yaml_json.h"

namespace eft::spec {

using internal::FormatDouble;
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
      // Hugging Face TrainingArguments and TRL's SFTConfig, as people type them.
      {"perdevicetrainbatchsize", "micro_batch_size"},
      {"gradientaccumulationsteps", "global_batch_size"}, {"maxseqlength", "max_seq_len"},
      {"evalsteps", "eval_every_steps"},  {"evalstrategy", "eval_every_steps"},
      {"bf16", "precision"},           {"fp16", "precision"},
      {"torchdtype", "precision"},     {"warmupratio", "warmup_ratio"},
      {"evaldataset", "eval"},
      {"traindataset", "train"},       {"lorar", "r"},
      {"loraalpha", "alpha"},          {"loradropout", "dropout"},
  };
  return *kAliases;
}

// Where the eft field is not a rename, a word on how it differs, appended to "did you mean".
const std::map<std::string, std::string>& AliasNotes() {
  static const auto* kNotes = new std::map<std::string, std::string>{
      {"gradientaccumulationsteps",
       "; eft takes the batch per optimizer step, global_batch_size = micro_batch_size x accumulation x "
       "world size, and derives the accumulation for whatever world size the job runs at"},
      {"perdevicetrainbatchsize", "; sequences per forward/backward on one rank"},
      {"bf16", ": bf16 | fp32 | auto"},
      {"fp16", ": bf16 | fp32 | auto (eft has no fp16)"},
      {"evalstrategy", ": evaluate every N steps, 0: at full checkpoints"},
  };
  return *kNotes;
}

const pb::FieldDescriptor* FindFolded(const pb::Descriptor* d, const std::string& folded) {
  for (int i = 0; i < d->field_count(); ++i) {
    if (Fold(d->field(i)->name()) == folded) return d->field(i);
  }
  return nullptr;
}

// The path of a field named `folded` elsewhere in the spec than `d` ("spec.training.lr"), breadth
// first; "" when there is none.
std::string FindInSpec(const pb::Descriptor* d, const std::string& folded) {
  std::deque<std::pair<const pb::Descriptor*, std::string>> queue = {{v1::JobSpec::descriptor(), "spec"}};
  while (!queue.empty()) {
    auto [desc, path] = queue.front();
    queue.pop_front();
    if (desc != d) {
      if (const auto* f = FindFolded(desc, folded)) return path + "." + f->name();
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

// Returns the field name the user probably meant (a sibling: "lr"; elsewhere in the spec:
// "spec.training.lr"), or "" when nothing is close enough to be a useful guess.
std::string Suggest(const pb::Descriptor* d, const std::string& key) {
  std::string folded = Fold(key);
  auto alias = Aliases().find(folded);
  std::string target = alias != Aliases().end() ? Fold(alias->second) : folded;
  if (const auto* f = FindFolded(d, target)) return f->name();
  // A known name from another tool means its eft field, wherever that lives, before anything that
  // merely looks alike here ("save_steps" is checkpoint.every_steps, not training.max_steps).
  if (alias != Aliases().end()) {
    if (std::string elsewhere = FindInSpec(d, target); !elsewhere.empty()) return elsewhere;
  }

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
  return FindInSpec(d, target);
}

// ---------------------------------------------------------------------------------------------
// The checking walk: user JSON -> canonical JSON for protobuf's parser.

Status CheckMessage(const pb::Descriptor* d, const json& in, const std::string& path, json* out);

// data.eval's short forms as the list of {name, path} the schema holds: one path is a set named
// "eval" ("" none: how specs printed before named sets said so), a map {NAME: PATH} one set per
// entry in name order (TRL's eval_dataset dict), one {name, path} that set. Anything else is
// returned as it is.
json EvalSetsAsList(const json& value) {
  if (value.is_string()) {
    if (value.get<std::string>().empty()) return json::array();
    return json::array({{{"name", "eval"}, {"path", value}}});
  }
  if (!value.is_object()) return value;
  if (value.contains("path")) return json::array({value});  // one {name, path}, not a set named "path"
  json list = json::array();
  for (const auto& [name, path] : value.items()) list.push_back({{"name", name}, {"path", path}});
  return list;
}

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
  // An integer literal beyond 64 bits reaches here as a double (JSON and YAML parsers read it so), and
  // -9223372036854775809 rounds to -2^63, which fits: a float exactly at the bound is refused too.
  const bool rounded_to_the_bound = v.is_number_float() && is64 && !is_unsigned && value == lo;
  if (value < lo || value > hi || rounded_to_the_bound) {
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
      auto note = AliasNotes().find(Fold(key));
      return Status::InvalidArgument(
          field_path + ": unknown field " +
          (guess.empty() ? "(fields here: " + FieldList(d) + ")"
                         : "(did you mean " + guess + "?" + (note != AliasNotes().end() ? note->second : "") + ")"));
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
      // Checked as any string is (UTF-8: found by fuzz/job_spec_fuzz.cc, nlohmann's dump threw).
      if (value.is_string() && f->full_name() == "eft.v1.LoraSpec.target_modules") {
        json item;
        EFT_RETURN_IF_ERROR(CheckValue(f, value, field_path, &item));
        (*out)[f->name()] = json::array({item});
        continue;
      }
      const bool eval_sets = f->full_name() == "eft.v1.DataSpec.eval";
      const json list = eval_sets ? EvalSetsAsList(value) : value;
      if (!list.is_array()) {
        if (eval_sets) {
          return Status::InvalidArgument(field_path + ": expected a path, a map {NAME: PATH} or a list of {name, path}, "
                                         "got " + json(value).dump());
        }
        return TypeError(field_path, ExpectedContainer(f), value);
      }
      converted = json::array();
      for (size_t i = 0; i < list.size(); ++i) {
        json element;
        EFT_RETURN_IF_ERROR(CheckValue(f, list[i], field_path + "[" + std::to_string(i) + "]", &element));
        converted.push_back(std::move(element));
      }
    } else if (f->full_name() == "eft.v1.CheckpointSpec.memory_every_steps" && value.is_number_integer()) {
      // "auto" or a number of steps: a number is written without quotes.
      converted = value.dump();
    } else {
      EFT_RETURN_IF_ERROR(CheckValue(f, value, field_path, &converted));
    }
    (*out)[f->name()] = std::move(converted);
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
