#include "trainer/io/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace eft::trainer {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // Hugging Face's own limit

struct KnownDtype {
  const char* name;
  uint64_t size;
};
// The dtypes LibTorch 1.13 holds; safetensors.cc maps each name to its at::ScalarType.
constexpr KnownDtype kKnownDtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"I16", 2}, {"F16", 2},
                                       {"BF16", 2}, {"I32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}};
// Dtypes the format defines but LibTorch 1.13 cannot hold: named as unsupported, not unknown.
constexpr const char* kUnsupportedDtypes[] = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                              "F4", "F6_E2M3", "F6_E3M2", "C64"};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON value for an error message. dump() recurses, so a hostile header nested a million deep
// would overflow the stack: only flat values are printed, and long ones are cut.
std::string Brief(const json& j) {
  if (j.is_structured()) {
    for (const auto& v : j) {
      if (v.is_structured()) return std::string("a nested ") + j.type_name();
    }
  }
  std::string s = j.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// Parses `shape`: non-negative integers whose product (with 0 counted as 1, as strides are) fits in
// int64, so neither numel nor any stride LibTorch derives from it can overflow.
bool ParseShape(const json& j, std::vector<int64_t>* shape, uint64_t* numel, std::string* why) {
  if (!j.is_array()) {
    *why = "shape must be an array of non-negative integers, got " + Brief(j);
    return false;
  }
  uint64_t n = 1;
  int64_t stride_product = 1;
  for (const auto& d : j) {
    if (!d.is_number_unsigned()) {
      *why = "shape must be an array of non-negative integers, got " + Brief(j);
      return false;
    }
    uint64_t v = d.get<uint64_t>();
    int64_t clamped = 0;
    if (v > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(stride_product, std::max<int64_t>(static_cast<int64_t>(v), 1), &clamped)) {
      *why = "shape " + Brief(j) + " is too large";
      return false;
    }
    stride_product = clamped;
    n *= v;  // cannot overflow: bounded by stride_product
    shape->push_back(static_cast<int64_t>(v));
  }
  *numel = n;
  return true;
}

// Reads and validates one header entry; `data_size` bounds the offsets.
Status ParseEntry(const std::string& path, const std::string& name, const json& j, uint64_t data_size,
                  SafetensorsHeaderEntry* e) {
  auto fail = [&](const std::string& why) { return Status::DataLoss(path + ": tensor '" + name + "' " + why); };
  if (!j.is_object()) return fail("is not a JSON object: " + Brief(j));
  e->name = name;
  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) return fail("has no string \"dtype\"");
  e->dtype = dt->get<std::string>();
  const KnownDtype* info = nullptr;
  for (const auto& d : kKnownDtypes) {
    if (e->dtype == d.name) info = &d;
  }
  if (info == nullptr) {
    for (const char* u : kUnsupportedDtypes) {
      if (e->dtype == u) return fail("has dtype '" + e->dtype + "', which LibTorch 1.13 cannot hold");
    }
    return fail("has unknown dtype '" + e->dtype + "'");
  }
  e->dtype_size = info->size;

  auto sh = j.find("shape");
  if (sh == j.end()) return fail("has no \"shape\"");
  uint64_t numel = 0;
  std::string why;
  if (!ParseShape(*sh, &e->shape, &numel, &why)) return fail(why);

  auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return fail("data_offsets must be [begin, end] of non-negative integers, got " +
                (off == j.end() ? std::string("nothing") : Brief(*off)));
  }
  e->begin = (*off)[0].get<uint64_t>();
  e->end = (*off)[1].get<uint64_t>();
  if (e->begin > e->end) return fail("data_offsets " + RangeString(e->begin, e->end) + " have begin > end");
  if (e->end > data_size) {
    return fail("data_offsets " + RangeString(e->begin, e->end) + " exceed the data section (" +
                std::to_string(data_size) + " bytes)");
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, info->size, &nbytes)) {
    return fail("shape " + ShapeString(e->shape) + " is too large");
  }
  if (nbytes != e->end - e->begin) {
    return fail("has shape " + ShapeString(e->shape) + " and dtype " + e->dtype + " (" + std::to_string(nbytes) +
                " bytes) but data_offsets " + RangeString(e->begin, e->end) + " span " +
                std::to_string(e->end - e->begin) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, std::string_view head, uint64_t file_size) {
  if (file_size < 8) {
    return Status::DataLoss(path + ": file is " + std::to_string(file_size) +
                            " bytes, too short for the 8-byte header length");
  }
  if (head.size() < 8) return Status::DataLoss(path + ": the 8-byte header length was not read");
  uint64_t header_len = 0;
  std::memcpy(&header_len, head.data(), 8);  // little-endian on disk, as on every host eft runs on
  if (header_len > file_size - 8) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the file (" +
                            std::to_string(file_size) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_len) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes >> 20) + " MB limit");
  }
  // The reader passes the whole file; only a caller with a cut file (the fuzz target) gets here.
  if (header_len > head.size() - 8) return Status::DataLoss(path + ": the header was not read whole");
  const char* header = head.data() + 8;
  // nlohmann stops at a NUL as if the input ended there, which would let garbage after it through.
  if (std::memchr(header, '\0', header_len) != nullptr) {
    return Status::DataLoss(path + ": header contains a NUL byte (padding must be spaces)");
  }
  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  out.data_size = file_size - 8 - header_len;

  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name is corruption.
  std::string duplicate;
  std::set<std::string> top_keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!top_keys.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(header, header + header_len, cb);
  } catch (const json::exception& e) {
    return Status::DataLoss(path + ": header is not valid JSON: " + e.what());
  }
  if (!h.is_object()) return Status::DataLoss(path + ": header is not a JSON object");
  if (!duplicate.empty()) return Status::DataLoss(path + ": header names '" + duplicate + "' twice");

  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) return Status::DataLoss(path + ": __metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Status::DataLoss(path + ": __metadata__ value for '" + m.key() + "' is not a string: " + Brief(*m));
        }
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsHeaderEntry e;
    EFT_RETURN_IF_ERROR(ParseEntry(path, it.key(), *it, out.data_size, &e));
    out.entries.push_back(std::move(e));
  }

  // Tensors must tile the data section exactly, as Hugging Face's reader requires: no overlap
  // (one write would show through another tensor) and no gap (bytes that nothing describes).
  std::sort(out.entries.begin(), out.entries.end(), [](const SafetensorsHeaderEntry& a, const SafetensorsHeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < out.entries.size(); ++i) {
    const SafetensorsHeaderEntry& e = out.entries[i];
    if (e.begin < covered) {
      const SafetensorsHeaderEntry& p = out.entries[i - 1];
      return Status::DataLoss(path + ": tensors '" + p.name + "' " + RangeString(p.begin, p.end) + " and '" + e.name +
                              "' " + RangeString(e.begin, e.end) + " overlap");
    }
    if (e.begin > covered) {
      return Status::DataLoss(path + ": data section bytes [" + std::to_string(covered) + ", " +
                              std::to_string(e.begin) + ") before tensor '" + e.name +
                              "' belong to no tensor (metadata incomplete buffer)");
    }
    covered = e.end;
  }
  if (covered != out.data_size) {
    return Status::DataLoss(path + ": data section is " + std::to_string(out.data_size) +
                            " bytes but the tensors cover " + std::to_string(covered) +
                            " (metadata incomplete buffer)");
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& index_path, std::string_view text) {
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    return Status::DataLoss(index_path + ": not valid JSON: " + e.what());
  }
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || wm == index.end() || !wm->is_object()) {
    return Status::DataLoss(index_path + ": no \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) return Status::DataLoss(index_path + ": weight_map['" + it.key() + "'] is not a string");
    const std::string file = it->get<std::string>();
    // Shards live beside the index; refusing other paths keeps a hostile index inside its directory.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Status::DataLoss(index_path + ": weight_map['" + it.key() + "'] names '" + file +
                              "', not a file name in the same directory");
    }
    weight_map[it.key()] = file;
  }
  return weight_map;
}

}  // namespace eft::trainer
