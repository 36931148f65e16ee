// Memory snapshot files for the worker's tests: what a rank writes into EFT_SNAPSHOT_DIR, and the
// event it reports it with.
#pragma once

#include <filesystem>
#include <random>
#include <string>

#include "common/crc32c.h"
#include "common/memory_snapshot.h"
#include "common/rank_protocol.h"
#include "tests/unit/worker/process_test_util.h"

namespace eft::worker::testing {

// `bytes` pseudo-random bytes, different for each seed.
inline std::string SnapshotBytes(size_t bytes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string out(bytes, '\0');
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

// Writes rank `rank`'s file of `step` into `incoming` as eft-train does, and returns its event.
inline rank::MemorySnapshotEvent WriteRankSnapshot(const std::string& incoming, int64_t step, int rank, int world,
                                                   const std::string& bytes) {
  const std::string dir = snapshot::HeldStepDir(incoming, step);
  std::filesystem::create_directories(dir);
  rank::MemorySnapshotEvent e;
  e.step = step;
  e.rank = rank;
  e.world_size = world;
  e.path = dir + "/" + snapshot::ShardFileName(rank, world);
  e.bytes = static_cast<int64_t>(bytes.size());
  e.crc32c = Crc32c(bytes.data(), bytes.size());
  WriteWholeFile(e.path, bytes);
  return e;
}

inline size_t CountFiles(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    n += it->is_regular_file();
  }
  return n;
}

}  // namespace eft::worker::testing
