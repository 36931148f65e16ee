#include "trainer/tracking/tensorboard_events.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/crc32c.h"

namespace eft::trainer::tensorboard {
namespace {

namespace fs = std::filesystem;

constexpr char kNamePrefix[] = "events.out.tfevents.";

// Protobuf's wire format: a key is (field number << 3) | wire type.
enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(std::string* out, int field, WireType type) { PutVarint(out, (static_cast<uint64_t>(field) << 3) | type); }

// Little-endian whatever the host's order.
void PutFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutBytes(std::string* out, int field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// Event's wall_time and step, proto3's way: left out at 0.
std::string EventHeader(double wall_time, int64_t step) {
  std::string e;
  if (wall_time != 0) {
    uint64_t bits;
    std::memcpy(&bits, &wall_time, sizeof bits);
    PutKey(&e, 1, kFixed64);
    PutFixed(&e, bits, 8);
  }
  if (step != 0) {
    PutKey(&e, 2, kVarint);
    PutVarint(&e, static_cast<uint64_t>(step));  // a negative int64 as ten bytes, as protobuf does
  }
  return e;
}

uint64_t GetFixed(std::string_view bytes, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return v;
}

}  // namespace

std::string EncodeFileVersionEvent(double wall_time) {
  std::string e = EventHeader(wall_time, 0);
  PutBytes(&e, 3, kFileVersion);
  return e;
}

std::string EncodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    if (!s.tag.empty()) PutBytes(&value, 1, s.tag);
    uint32_t bits;
    std::memcpy(&bits, &s.value, sizeof bits);
    PutKey(&value, 2, kFixed32);  // a oneof member: written even at 0
    PutFixed(&value, bits, 4);
    PutBytes(&summary, 1, value);
  }
  std::string e = EventHeader(wall_time, step);
  PutBytes(&e, 5, summary);
  return e;
}

std::string EncodeSessionLogEvent(double wall_time, int64_t step, SessionStatus status, std::string_view msg) {
  std::string log;
  PutKey(&log, 1, kVarint);
  PutVarint(&log, static_cast<uint64_t>(status));
  if (!msg.empty()) PutBytes(&log, 3, msg);
  std::string e = EventHeader(wall_time, step);
  PutBytes(&e, 7, log);
  return e;
}

uint32_t MaskedCrc32c(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string FrameRecord(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  PutFixed(&record, data.size(), 8);
  PutFixed(&record, MaskedCrc32c(record), 4);
  record.append(data);
  PutFixed(&record, MaskedCrc32c(data), 4);
  return record;
}

Result<RecordsRead> ReadRecords(std::string_view file) {
  RecordsRead read;
  size_t pos = 0;
  while (pos < file.size()) {
    const std::string_view rest = file.substr(pos);
    if (rest.size() < 12) {
      read.truncated_tail = true;
      break;
    }
    if (static_cast<uint32_t>(GetFixed(rest.substr(8), 4)) != MaskedCrc32c(rest.substr(0, 8))) {
      return Status::DataLoss("event file: the length of the record at byte " + std::to_string(pos) +
                              " fails its CRC");
    }
    const uint64_t length = GetFixed(rest, 8);
    if (length > rest.size() - 12 || rest.size() - 12 - length < 4) {
      read.truncated_tail = true;
      break;
    }
    const std::string_view data = rest.substr(12, length);
    if (static_cast<uint32_t>(GetFixed(rest.substr(12 + length), 4)) != MaskedCrc32c(data)) {
      return Status::DataLoss("event file: the record at byte " + std::to_string(pos) + " fails its CRC");
    }
    read.records.emplace_back(data);
    pos += 16 + length;
  }
  return read;
}

std::string EventFileName(int64_t seconds, std::string_view host, int pid, int n) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(seconds));
  return std::string(kNamePrefix) + digits + "." + std::string(host) + "." + std::to_string(pid) + "." +
         std::to_string(n);
}

std::optional<int64_t> EventFileSeconds(std::string_view name) {
  if (name.substr(0, sizeof kNamePrefix - 1) != kNamePrefix) return std::nullopt;
  name.remove_prefix(sizeof kNamePrefix - 1);
  int64_t seconds = 0;
  size_t i = 0;
  for (; i < name.size() && i < 18 && name[i] >= '0' && name[i] <= '9'; ++i) seconds = seconds * 10 + (name[i] - '0');
  if (i == 0 || (i < name.size() && name[i] != '.')) return std::nullopt;
  return seconds;
}

Result<int64_t> NextEventFileSeconds(const std::string& dir, int64_t now_seconds) {
  int64_t next = now_seconds;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return next;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (std::optional<int64_t> s = EventFileSeconds(it->path().filename().string())) next = std::max(next, *s + 1);
  }
  if (ec) return Status::IoError("cannot list " + dir + ": " + ec.message());
  return next;
}

Result<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir, double wall_time,
                                                                 std::string_view host, int pid) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  EFT_ASSIGN_OR_RETURN(const int64_t seconds,
                       NextEventFileSeconds(dir, static_cast<int64_t>(std::floor(wall_time))));
  for (int n = 0; n < 100; ++n) {
    const std::string path = dir + "/" + EventFileName(seconds, host, pid, n);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
    std::unique_ptr<EventFileWriter> writer(new EventFileWriter(fd, path));
    if (Status s = writer->Append(EncodeFileVersionEvent(wall_time)); !s.ok()) {
      writer.reset();
      ::unlink(path.c_str());  // not even a first record: nothing for TensorBoard to read
      return s;
    }
    return writer;
  }
  return Status::IoError("cannot create an event file in " + dir + ": 100 names taken");
}

std::unique_ptr<EventFileWriter> EventFileWriter::FromFd(int fd, std::string path) {
  return std::unique_ptr<EventFileWriter>(new EventFileWriter(fd, std::move(path)));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventFileWriter::Append(std::string_view event) {
  const std::string record = FrameRecord(event);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError("cannot write " + path_ + ": " + std::strerror(errno));
    if (n == 0) return Status::IoError("cannot write " + path_ + ": nothing written");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace eft::trainer::tensorboard
