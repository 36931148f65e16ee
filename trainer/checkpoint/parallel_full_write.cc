#include "trainer/checkpoint/parallel_full_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/stopwatch.h"
#include "trainer/io/positional_file.h"
#include "trainer/io/safetensors_layout.h"

namespace eft::trainer {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPage = 4096;
constexpr int kHeader = -1;  // Segment::tensor of a file's header bytes

uint64_t CeilPage(uint64_t x) { return (x + kPage - 1) / kPage * kPage; }

// Bytes [begin, end) of a file, produced by one rank: its header (rank 0) or a run of one tensor's
// elements that lie in one rank's slice of the unit.
struct Segment {
  uint64_t begin = 0, end = 0;
  int producer = 0;
  int tensor = kHeader;
};

// A run of whole pages one rank owns and writes: [begin, end) (end may be the file's end).
struct Run {
  size_t file = 0;
  uint64_t begin = 0, end = 0;
  int owner = 0;
};

// Bytes a rank produces inside a page another rank owns: sent to the owner before writing.
struct Transfer {
  size_t file = 0;
  uint64_t begin = 0, end = 0;
  int from = 0, to = 0;
};

struct PlannedFile {
  const FullWriteFile* spec = nullptr;
  SafetensorsLayout layout;
  std::vector<Segment> segments;  // in file order, tiling [0, file_bytes)
};

// Everything every rank computes alike from the declarations and the world size.
struct Plan {
  std::vector<PlannedFile> files;
  std::vector<Run> runs;            // in file order, file by file; tile every file
  std::vector<Transfer> transfers;  // in file order
};

int64_t ElementsOf(const TensorDecl& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// The segment holding byte `at` of a file.
const Segment& SegmentAt(const PlannedFile& f, uint64_t at) {
  auto it = std::upper_bound(f.segments.begin(), f.segments.end(), at,
                             [](uint64_t x, const Segment& s) { return x < s.begin; });
  return *(it - 1);
}

Result<Plan> MakePlan(const std::vector<UnitState>& units, const std::vector<FullWriteFile>& files, int world) {
  Plan plan;
  plan.files.resize(files.size());
  for (size_t fi = 0; fi < files.size(); ++fi) {
    PlannedFile& pf = plan.files[fi];
    pf.spec = &files[fi];
    EFT_ASSIGN_OR_RETURN(pf.layout, LayOutSafetensors(files[fi].name, files[fi].tensors, files[fi].metadata));
    pf.segments.push_back({0, pf.layout.header.size(), 0, kHeader});
    for (size_t t = 0; t < files[fi].tensors.size(); ++t) {
      const FullWriteTensor& src = files[fi].sources[t];
      const FlatParamUnit& unit = *units[src.unit].unit;
      const int64_t numel = ElementsOf(files[fi].tensors[t]);
      if (numel != unit.specs()[src.spec].numel()) {
        return Status::InvalidArgument(files[fi].name + ": tensor '" + files[fi].tensors[t].name +
                                       "' does not match its parameter's size");
      }
      const int64_t first = unit.offset(src.spec), shard = unit.shard_numel();
      const uint64_t es = c10::elementSize(files[fi].tensors[t].dtype);
      for (int r = 0; r < world; ++r) {
        const int64_t lo = std::max(first, r * shard), hi = std::min(first + numel, (r + 1) * shard);
        if (lo >= hi) continue;
        pf.segments.push_back({pf.layout.offsets[t] + static_cast<uint64_t>(lo - first) * es,
                               pf.layout.offsets[t] + static_cast<uint64_t>(hi - first) * es, r, static_cast<int>(t)});
      }
    }
    const uint64_t size = pf.layout.file_bytes;
    // The page rule: a page belongs to whoever produces its first byte. A segment owns the pages
    // starting inside it; its bytes before its first page start (its head) lie in the page of an
    // earlier segment's producer.
    for (const Segment& s : pf.segments) {
      const uint64_t b = CeilPage(s.begin), e = std::min(CeilPage(s.end), size);
      if (b < e) {
        if (!plan.runs.empty() && plan.runs.back().file == fi && plan.runs.back().owner == s.producer &&
            plan.runs.back().end == b) {
          plan.runs.back().end = e;
        } else {
          plan.runs.push_back({fi, b, e, s.producer});
        }
      }
      if (s.begin % kPage == 0) continue;
      const int owner = SegmentAt(pf, s.begin / kPage * kPage).producer;
      if (owner != s.producer) plan.transfers.push_back({fi, s.begin, std::min(s.end, CeilPage(s.begin)), s.producer, owner});
    }
  }
  return plan;
}

// Renders bytes [begin, end) of file `f` into dst. Only this rank's segments and the transfers it
// received may be touched (the page rule guarantees it for the runs it owns).
class Renderer {
 public:
  Renderer(const Plan& plan, const std::vector<UnitState>& units, int rank) : plan_(plan), units_(units), rank_(rank) {}
  void Receive(size_t file, uint64_t begin, const char* data) { received_[{file, begin}] = data; }

  Status Render(size_t fi, uint64_t begin, uint64_t end, char* dst) const {
    const PlannedFile& f = plan_.files[fi];
    auto it = std::upper_bound(f.segments.begin(), f.segments.end(), begin,
                               [](uint64_t x, const Segment& s) { return x < s.begin; }) - 1;
    for (; it != f.segments.end() && it->begin < end; ++it) {
      const uint64_t x = std::max(it->begin, begin), y = std::min(it->end, end);
      if (x >= y) continue;
      char* out = dst + (x - begin);
      if (it->producer != rank_) {
        auto r = received_.find({fi, it->begin});
        if (r == received_.end()) return Status::Internal(f.spec->name + ": no bytes received for offset " + std::to_string(it->begin));
        std::memcpy(out, r->second + (x - it->begin), y - x);
      } else if (it->tensor == kHeader) {
        std::memcpy(out, f.layout.header.data() + x, y - x);
      } else {
        RenderTensor(f, static_cast<size_t>(it->tensor), x - f.layout.offsets[it->tensor], y - f.layout.offsets[it->tensor], out);
      }
    }
    return Status::Ok();
  }

 private:
  // Bytes [b, e) of tensor t's data, from this rank's slice.
  void RenderTensor(const PlannedFile& f, size_t t, uint64_t b, uint64_t e, char* out) const {
    const TensorDecl& decl = f.spec->tensors[t];
    const FullWriteTensor& src = f.spec->sources[t];
    const UnitState& us = units_[src.unit];
    const FlatParamUnit& unit = *us.unit;
    const at::Tensor& vec = src.source == FullWriteTensor::Source::kParams   ? const_cast<FlatParamUnit&>(unit).shard()
                            : src.source == FullWriteTensor::Source::kExpAvg ? us.exp_avg
                                                                             : us.exp_avg_sq;
    const uint64_t es = c10::elementSize(decl.dtype);
    const int64_t e0 = static_cast<int64_t>(b / es), e1 = static_cast<int64_t>((e + es - 1) / es);
    const int64_t local = unit.offset(src.spec) + e0 - unit.shard_offset();
    at::Tensor piece = vec.narrow(0, local, e1 - e0);
    if (b % es == 0 && e % es == 0) {
      // Converted straight into the write buffer (a device-to-host copy on an accelerator).
      at::from_blob(out, {e1 - e0}, at::TensorOptions().dtype(decl.dtype)).copy_(piece);
    } else {  // a page boundary inside an element: only where dtypes of different sizes share a file
      at::Tensor c = piece.to(at::kCPU, decl.dtype).contiguous();
      std::memcpy(out, static_cast<const char*>(c.data_ptr()) + (b - static_cast<uint64_t>(e0) * es), e - b);
    }
  }

  const Plan& plan_;
  const std::vector<UnitState>& units_;
  int rank_;
  std::map<std::pair<size_t, uint64_t>, const char*> received_;
};

std::string PartialPath(const std::string& dir, const std::string& name) { return dir + "/" + name + ".partial"; }

// Rank 0: the directory and every file, empty.
Status CreateFiles(const std::string& dir, const std::vector<FullWriteFile>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("creating " + dir + ": " + ec.message());
  for (const FullWriteFile& f : files) {
    const std::string path = PartialPath(dir, f.name);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IoError("creating " + path + ": " + std::strerror(errno));
    ::close(fd);
  }
  return Status::Ok();
}

void RemovePartials(const std::string& dir, const std::vector<FullWriteFile>& files) {
  for (const FullWriteFile& f : files) ::unlink(PartialPath(dir, f.name).c_str());
}

}  // namespace

Result<std::vector<ManifestFile>> WriteFilesInParallel(Communicator& comm, const std::vector<UnitState>& units,
                                                       const std::string& dir, const std::vector<FullWriteFile>& files,
                                                       ParallelWriteTimes* times, uint64_t chunk_bytes) {
  const int rank = comm.rank(), world = comm.world();
  ParallelWriteTimes t;
  t.record_writes = times != nullptr && times->record_writes;
  chunk_bytes = std::max<uint64_t>(kPage, chunk_bytes / kPage * kPage);
  // The plan is the same on every rank; an error in it (a bad declaration) is too, so every rank
  // returns it without a collective.
  EFT_ASSIGN_OR_RETURN(Plan plan, MakePlan(units, files, world));

  // 1. Rank 0 creates the files; everyone learns whether it could before touching them.
  Status created;
  if (rank == 0) created = CreateFiles(dir, files);
  at::Tensor flag = at::tensor({created.ok() ? 0.0 : 1.0}, at::kDouble);
  const Stopwatch broadcast;
  comm.Broadcast(flag, 0);
  t.wait += broadcast.Seconds();
  if (flag.item<double>() > 0) {
    if (rank == 0) {
      RemovePartials(dir, files);
      return created;
    }
    return Status::IoError("rank 0 could not create the files of " + dir + " (see its log)");
  }

  // 2. The boundary pieces: every rank renders what it produces inside others' pages; one
  // all-gather (sizes known to all from the plan) brings each owner its bytes.
  Renderer renderer(plan, units, rank);
  std::vector<uint64_t> send_bytes(world, 0);
  for (const Transfer& x : plan.transfers) send_bytes[x.from] += x.end - x.begin;
  const uint64_t slot = (*std::max_element(send_bytes.begin(), send_bytes.end()) + 3) / 4 * 4;  // fp32 elements
  at::Tensor gathered;
  std::vector<char> outgoing(slot);
  if (slot > 0) {
    const Stopwatch render;
    uint64_t at_byte = 0;
    for (const Transfer& x : plan.transfers) {
      if (x.from != rank) continue;
      EFT_RETURN_IF_ERROR(renderer.Render(x.file, x.begin, x.end, outgoing.data() + at_byte));
      at_byte += x.end - x.begin;
    }
    t.convert += render.Seconds();
    const Stopwatch exchange;
    const c10::Device device = units.empty() ? c10::Device(c10::kCPU) : units.front().unit->shard().device();
    at::Tensor mine = at::from_blob(outgoing.data(), {static_cast<int64_t>(slot / 4)}, at::kFloat).to(device);
    at::Tensor all = at::empty({static_cast<int64_t>(slot / 4) * world}, mine.options());
    comm.AllGather(mine, all);  // raw bytes as fp32: collectives copy them bit for bit
    gathered = all.cpu();
    std::vector<uint64_t> cursor(world, 0);
    const char* base = static_cast<const char*>(gathered.data_ptr());
    for (const Transfer& x : plan.transfers) {
      if (x.to == rank) renderer.Receive(x.file, x.begin, base + x.from * slot + cursor[x.from]);
      cursor[x.from] += x.end - x.begin;
    }
    t.exchange = exchange.Seconds();
  }

  // 3. This rank's runs, in chunks; a failure check among all ranks every few chunks.
  std::vector<size_t> mine;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    if (plan.runs[i].owner == rank) mine.push_back(i);
  }
  std::vector<uint32_t> crcs(plan.runs.size(), 0);
  std::map<size_t, std::unique_ptr<PositionalFile>> open;
  std::vector<char> buffer(chunk_bytes);
  const uint64_t round_bytes = 8 * chunk_bytes;
  Status local;
  size_t next_run = 0;
  uint64_t next_at = mine.empty() ? 0 : plan.runs[mine[0]].begin;
  bool any_failed = false;
  while (true) {
    uint64_t this_round = 0;
    while (local.ok() && next_run < mine.size() && this_round < round_bytes) {
      const Run& run = plan.runs[mine[next_run]];
      auto& file = open[run.file];
      if (file == nullptr) {
        auto opened = PositionalFile::Open(PartialPath(dir, files[run.file].name), round_bytes);
        if (!opened.ok()) {
          local = opened.status();
          break;
        }
        file = std::move(*opened);
      }
      // Chunks end on multiples of chunk_bytes in the file (pages: a boundary piece never splits).
      const uint64_t end = std::min(run.end, (next_at / chunk_bytes + 1) * chunk_bytes);
      const Stopwatch render;
      local = renderer.Render(run.file, next_at, end, buffer.data());
      t.convert += render.Seconds();
      const Stopwatch write;
      if (!local.ok()) break;
      crcs[mine[next_run]] = Crc32c(buffer.data(), end - next_at, crcs[mine[next_run]]);
      local = file->Write(next_at, buffer.data(), end - next_at);
      if (t.record_writes) t.writes.emplace_back(run.file, next_at, end - next_at);
      t.write += write.Seconds();
      t.bytes += static_cast<int64_t>(end - next_at);
      this_round += end - next_at;
      next_at = end;
      if (next_at == run.end && ++next_run < mine.size()) next_at = plan.runs[mine[next_run]].begin;
    }
    if (local.ok() && next_run == mine.size()) {  // done: make it durable before saying so
      const Stopwatch sync;
      for (auto& [fi, file] : open) {
        if (file == nullptr) continue;
        local = file->SyncAndClose();
        file.reset();
        if (!local.ok()) break;
      }
      t.write += sync.Seconds();
      if (local.ok()) ++next_run;  // past the end: synced
    }
    if (!local.ok()) EFT_LOG(ERROR) << "rank " << rank << ": full checkpoint write into " << dir << " failed: " << local;
    at::Tensor flags = at::tensor({local.ok() ? 0.0 : 1.0, next_run > mine.size() ? 0.0 : 1.0}, at::kDouble);
    const Stopwatch check;
    comm.AllReduceSum(flags);
    t.wait += check.Seconds();
    any_failed = flags[0].item<double>() > 0;
    if (any_failed || flags[1].item<double>() == 0) break;
  }
  open.clear();  // closes what a failure left open

  // 4. The runs' CRCs to rank 0 (doubles hold them exactly; each run's entry is set by its owner).
  if (!any_failed) {
    at::Tensor all = at::zeros({static_cast<int64_t>(plan.runs.size())}, at::kDouble);
    double* a = all.data_ptr<double>();
    for (size_t i : mine) a[i] = crcs[i];
    const Stopwatch gather_crcs;
    comm.AllReduceSum(all);
    t.wait += gather_crcs.Seconds();
    for (size_t i = 0; i < plan.runs.size(); ++i) crcs[i] = static_cast<uint32_t>(all.data_ptr<double>()[i]);
  }
  if (times != nullptr) *times = std::move(t);
  if (any_failed) {
    if (rank == 0) RemovePartials(dir, files);
    if (!local.ok()) return local;
    return Status::IoError("another rank failed writing its part of " + dir + " (see its log)");
  }
  if (rank != 0) return std::vector<ManifestFile>{};
  std::vector<ManifestFile> out;
  for (size_t fi = 0; fi < files.size(); ++fi) out.push_back({files[fi].name, static_cast<int64_t>(plan.files[fi].layout.file_bytes), 0});
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const Run& r = plan.runs[i];
    out[r.file].crc32c = Crc32cCombine(out[r.file].crc32c, crcs[i], r.end - r.begin);
  }
  Status renamed;
  for (const FullWriteFile& f : files) {
    const std::string from = PartialPath(dir, f.name), to = dir + "/" + f.name;
    if (renamed.ok() && ::rename(from.c_str(), to.c_str()) != 0) {
      renamed = Status::IoError("renaming " + from + " to " + to + ": " + std::strerror(errno));
    }
  }
  if (!renamed.ok()) {
    RemovePartials(dir, files);
    return renamed;
  }
  return out;
}

}  // namespace eft::trainer
