// TensorBoard event files, written without TensorFlow or protobuf (docs/tracking.md, "TensorBoard").
//
// An event file is a sequence of TFRecords, each holding one serialized tensorboard.Event message:
//
//   record := uint64 length (little-endian) | uint32 MaskedCrc32c(the 8 length bytes)
//             | data (length bytes) | uint32 MaskedCrc32c(data)
//
// The few messages eft writes are encoded here by hand, field numbers as in TensorBoard's
// tensorboard/compat/proto/event.proto and summary.proto (proto3: a plain field at its default is
// left out, a oneof member never), so the bytes equal what TensorBoard's own Python writer makes of
// the same message (tests/unit/trainer/tracking/tensorboard_events_test.cc holds its bytes):
//
//   Event      { double wall_time = 1; int64 step = 2; oneof { string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; } }
//   Summary    { repeated Value value = 1; }   Value { string tag = 1; oneof { float simple_value = 2; } }
//   SessionLog { SessionStatus status = 1; string checkpoint_path = 2; string msg = 3; }  START 1, STOP 2
//
// A file's name is events.out.tfevents.<seconds>.<host>.<pid>.<n>; TensorBoard reads the files of a
// run directory in name order, and never returns to one it has left once a later one exists.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace eft::trainer::tensorboard {

inline constexpr char kFileVersion[] = "brain.Event:2";

struct Scalar {
  std::string tag;
  float value = 0;
};

enum class SessionStatus { kStart = 1, kStop = 2 };

// One serialized Event (no framing): the file's first ({file_version: kFileVersion}); scalars at
// `step` (one Summary with a Value per scalar); a SessionLog at `step`, with `msg` ("" left out).
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars);
std::string EncodeSessionLogEvent(double wall_time, int64_t step, SessionStatus status, std::string_view msg);

// TFRecord's CRC: CRC-32C of `bytes`, rotated right by 15 and offset by 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view bytes);
// `data` framed as one record.
std::string FrameRecord(std::string_view data);

// The records of an event file's bytes, in order. A file cut short in its last record (a writer
// killed mid-write, a full disk) gives the whole records before it and truncated_tail; a record whose
// CRC does not match is DataLoss. For tests and tools: eft writes, TensorBoard reads.
struct RecordsRead {
  std::vector<std::string> records;
  bool truncated_tail = false;
};
Result<RecordsRead> ReadRecords(std::string_view file);

// "events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>".
std::string EventFileName(int64_t seconds, std::string_view host, int pid, int n);
// The <seconds> of a file name EventFileName makes, or that TensorFlow, PyTorch and TensorBoard's
// writers make (events.out.tfevents.<seconds>.<anything>); nullopt for any other name.
std::optional<int64_t> EventFileSeconds(std::string_view name);
// The <seconds> a new event file in `dir` gets so that it sorts after every event file already there
// even when the nodes' clocks differ: max(now_seconds, the newest one's seconds + 1). A directory
// that does not exist has none. IoError when it cannot be listed.
Result<int64_t> NextEventFileSeconds(const std::string& dir, int64_t now_seconds);

// One event file, written by this process alone, each record as it comes: one write() per record
// (no user-space buffer, no fsync), so a process killed after Append returned has lost none of it
// (the page cache holds it), and one killed during Append leaves at most a truncated last record.
// Not thread-safe.
class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new file in it, named EventFileName(NextEventFileSeconds(
  // dir, wall_time), host, pid, n) with the first n that no file has (O_EXCL: never another
  // process's file), and writes its first record (EncodeFileVersionEvent). IoError naming the path.
  static Result<std::unique_ptr<EventFileWriter>> Create(const std::string& dir, double wall_time,
                                                         std::string_view host, int pid);
  // Writes to `fd` (owned from here) as if it were the new file `path`; writes nothing yet. For tests
  // of the failure path (/dev/full).
  static std::unique_ptr<EventFileWriter> FromFd(int fd, std::string path);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Frames and writes one serialized Event. IoError naming the path and the system's reason
  // ("... No space left on device"); after an error the file may end in a truncated record.
  Status Append(std::string_view event);
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace eft::trainer::tensorboard
