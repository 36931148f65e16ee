// The parallel write of a full checkpoint (checkpoint.full_write: parallel, docs/checkpoints.md):
// every rank writes its own slices of every unit straight into the final files, nothing is gathered.
//
// The layout of every file is fixed by the declared tensors (safetensors_layout.h), and every rank
// computes all of it, and which rank produces each byte (rank r: the elements of its 1/W slice of
// each unit; rank 0: the headers), without talking to the others. Rank 0 creates the files; then:
//   - Page rule: a 4 KiB page of a file is written by exactly one rank, the one producing the page's
//     first byte. The few bytes of a page another rank produces (at most the page's tail; the head
//     of that rank's run) are sent to the page's owner first, in one all-gather of every such
//     boundary piece. No two ranks (processes, nodes) ever write the same page, so clients that
//     write back whole pages (NFS) cannot overwrite each other's bytes.
//   - Every rank writes its pages in bounded chunks (PositionalFile's writeback pacing), checksums
//     each run of pages it owns as it writes it, and fsyncs every file it wrote to.
//   - Every 64 MiB a two-number all-reduce (failed, still writing) tells each rank whether another
//     has failed, so a write error anywhere (full disk, EIO) stops every rank within a chunk, not at
//     a collective's timeout.
//   - The runs' CRC-32Cs go to rank 0, which combines them in file order (Crc32cCombine) into each
//     file's manifest entry; no byte is read back.
// Files are written as NAME.partial and renamed by rank 0 once every rank has fsynced; a failed
// save removes them. Needs a directory every rank sees and that takes writes into one file from
// several processes or nodes (a local disk, NFS, Lustre...; not FUSE object-store mounts).
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "common/status.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/sharded_state.h"
#include "trainer/io/safetensors_writer.h"
#include "trainer/parallel/communicator.h"

namespace eft::trainer {

// What one tensor of a planned file holds: a whole parameter of a unit, as the unit's fp32 shard
// (kParams, converted to the tensor's dtype) or one of its moments.
struct FullWriteTensor {
  enum class Source { kParams, kExpAvg, kExpAvgSq };
  size_t unit = 0;  // index into the units
  size_t spec = 0;  // index into the unit's specs
  Source source = Source::kParams;
};

// One file to write: its name in the directory and tensors (declaration order = file order), with
// what each holds (parallel to tensors).
struct FullWriteFile {
  std::string name;
  std::vector<TensorDecl> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<FullWriteTensor> sources;
};

struct ParallelWriteTimes {
  double exchange = 0;  // the boundary pieces' all-gather
  double convert = 0;   // this rank's slices converted (or copied) into write buffers
  double write = 0;     // checksummed, written and fsynced
  double wait = 0;      // waiting for the other ranks (the per-chunk failure checks, the final CRCs)
  int64_t bytes = 0;    // written by this rank
  // With record_writes: every write this rank issued, as (file index, offset, length); tests check
  // the page rule with it.
  bool record_writes = false;
  std::vector<std::tuple<size_t, uint64_t, uint64_t>> writes;
};

// Collective. Writes `files` into `dir` (rank 0 creates the directory). `times` (may be null) is
// filled in. Returns, on rank 0, each
// file's size and CRC-32C (paths relative to `dir`, in the order of `files`); an empty list on the
// other ranks. A failure on any rank fails the call on every rank (the failing rank returns its own
// error; the others say another rank failed), and the partial files are removed.
// `chunk_bytes`: the write buffer and failure-check unit (tests make it small).
Result<std::vector<ManifestFile>> WriteFilesInParallel(Communicator& comm, const std::vector<UnitState>& units,
                                                       const std::string& dir, const std::vector<FullWriteFile>& files,
                                                       ParallelWriteTimes* times = nullptr,
                                                       uint64_t chunk_bytes = 8ull << 20);

}  // namespace eft::trainer
