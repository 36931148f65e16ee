#include "trainer/data/data_files.h"

#include <glob.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

bool IsGlob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

Result<std::vector<std::string>> Glob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      if (fs::is_regular_file(g.gl_pathv[i])) files.emplace_back(g.gl_pathv[i]);
    }
  }
  globfree(&g);
  if (rc == GLOB_ABORTED) return Status::IoError(pattern + ": cannot read a directory of the pattern");
  if (files.empty()) return Status::NotFound(pattern + ": no file matches");
  std::sort(files.begin(), files.end());  // glob sorts by the locale; names compare bytewise here
  return files;
}

// datasets' save_to_disk: state.json lists the shards ({"_data_files": [{"filename": ...}, ...]}).
Result<std::vector<std::string>> SavedDatasetFiles(const fs::path& dir) {
  const std::string state = (dir / "state.json").string();
  std::ifstream in(state);
  if (!in) return Status::NotFound(state + ": cannot open: " + std::strerror(errno));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("_data_files") || !j["_data_files"].is_array()) {
    return Status::InvalidArgument(state + ": not a datasets save_to_disk state (no _data_files list)");
  }
  std::vector<std::string> files;
  for (const auto& f : j["_data_files"]) {
    if (!f.is_object() || !f.contains("filename") || !f["filename"].is_string()) {
      return Status::InvalidArgument(state + ": _data_files: expected objects with a filename");
    }
    const std::string name = f["filename"].get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "..") {
      return Status::InvalidArgument(state + ": _data_files: '" + name + "' is not a file name in " + dir.string());
    }
    files.push_back((dir / name).string());
    if (!fs::is_regular_file(files.back())) return Status::NotFound(files.back() + ": listed in " + state + " but missing");
  }
  if (files.empty()) return Status::InvalidArgument(state + ": lists no data files");
  return files;
}

Result<std::vector<std::string>> DirectoryFiles(const fs::path& dir) {
  if (fs::is_regular_file(dir / "state.json")) return SavedDatasetFiles(dir);
  std::vector<std::string> parquet, others;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".parquet") {
      parquet.push_back(e.path().string());
    } else if (name.front() != '.') {
      others.push_back(name + (e.is_directory() ? "/" : ""));
    }
  }
  if (ec) return Status::IoError(dir.string() + ": cannot list: " + ec.message());
  if (!parquet.empty()) {
    std::sort(parquet.begin(), parquet.end());
    return parquet;
  }
  std::sort(others.begin(), others.end());
  if (fs::is_regular_file(dir / "dataset_dict.json")) {
    std::string splits;
    for (const auto& o : others) {
      if (o.back() == '/') splits += (splits.empty() ? "" : ", ") + o.substr(0, o.size() - 1);
    }
    return Status::InvalidArgument(dir.string() + ": a DatasetDict saved with save_to_disk: name one split's directory (" +
                                   splits + ")");
  }
  std::string listed;
  for (size_t i = 0; i < others.size() && i < 8; ++i) listed += (i ? ", " : "") + others[i];
  if (others.size() > 8) listed += ", ...";
  return Status::InvalidArgument(dir.string() + ": a directory with neither *.parquet files nor a save_to_disk "
                                 "state.json (it holds: " + (listed.empty() ? "nothing" : listed) + ")");
}

}  // namespace

const char* DataFileKindName(DataFileKind kind) {
  switch (kind) {
    case DataFileKind::kJsonl: return "jsonl";
    case DataFileKind::kParquet: return "parquet";
    case DataFileKind::kArrowFile: return "arrow";
    case DataFileKind::kArrowStream: return "arrow-stream";
  }
  return "?";
}

Result<std::vector<std::string>> ResolveDataFiles(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("no data path given");
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (fs::is_directory(status)) return DirectoryFiles(path);
  if (fs::exists(status)) return std::vector<std::string>{path};
  if (IsGlob(path)) return Glob(path);
  return Status::NotFound(path + ": cannot open: " + (ec ? ec.message() : "No such file or directory"));
}

Result<DataFileKind> DetectDataFileKind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  std::array<char, 6> head{};
  in.read(head.data(), head.size());
  const auto got = in.gcount();
  if (in.bad()) return Status::IoError(path + ": read error");
  if (got >= 4 && std::memcmp(head.data(), "PAR1", 4) == 0) return DataFileKind::kParquet;
  if (got >= 6 && std::memcmp(head.data(), "ARROW1", 6) == 0) return DataFileKind::kArrowFile;
  if (got >= 4 && std::memcmp(head.data(), "\xff\xff\xff\xff", 4) == 0) return DataFileKind::kArrowStream;
  return DataFileKind::kJsonl;
}

}  // namespace eft::trainer
