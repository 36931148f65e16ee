// TensorBoard's event files written by hand (trainer/tracking/tensorboard_events.h): the bytes against
// those TensorBoard's own Python writer made of the same events, CRC-32C against its published check
// value, truncated and corrupted files, the file name rule, and the write failure paths.
#include "trainer/tracking/tensorboard_events.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/file_util.h"

namespace eft::trainer::tensorboard {
namespace {

namespace fs = std::filesystem;

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const std::string X200 = [] {
  std::string s;
  for (int i = 0; i < 200; ++i) s += "78";  // 200 'x': lengths that take two varint bytes
  return s;
}();

// What TensorBoard 2.21's own writer made, once, of these five events (tensorboard.compat.proto's
// event_pb2.Event(...).SerializeToString() through tensorboard.summary.writer.record_writer.RecordWriter):
//   Event(wall_time=1700000000.5, file_version="brain.Event:2")
//   Event(wall_time=1700000001.25, step=7, summary=[train/loss 2.5, train/learning_rate 1e-4])
//   Event(wall_time=1700000002.0, step=4, session_log=SessionLog(status=START, msg="attempt 2"))
//   Event(wall_time=1700000003.0, step=0, summary=["eval/" + 200 x + "/loss" 0.0])
//   Event(wall_time=1700000004.0, step=300000, session_log=SessionLog(status=STOP))
// Each is one framed record: length, masked CRC of the length, the Event, masked CRC of the Event.
const std::vector<std::string> kTensorBoardRecords = {
    "1800000000000000a37f4b220900002040fc54d9411a0d627261696e2e4576656e743a322b353110",
    "3c00000000000000c8b7a3520900005040fc54d94110072a2f0a110a0a747261696e2f6c6f737315000020400a1a0a13747261696e2f6c65"
    "61726e696e675f726174651517b7d138a3f44411",
    "1a00000000000000129bd82d0900008040fc54d94110043a0d08011a09617474656d707420324030fbcc",
    "e9000000000000003533f489090000c040fc54d9412add010ada010ad2016576616c2f" + X200 + "2f6c6f737315000000000c66c634",
    "11000000000000009d6db52e0900000041fc54d94110e0a7123a02080288fc467e",
};

std::vector<std::string> OurEvents() {
  return {EncodeFileVersionEvent(1700000000.5),
          EncodeScalarsEvent(1700000001.25, 7, {{"train/loss", 2.5f}, {"train/learning_rate", 1e-4f}}),
          EncodeSessionLogEvent(1700000002.0, 4, SessionStatus::kStart, "attempt 2"),
          EncodeScalarsEvent(1700000003.0, 0, {{"eval/" + std::string(200, 'x') + "/loss", 0.0f}}),
          EncodeSessionLogEvent(1700000004.0, 300000, SessionStatus::kStop, "")};
}

TEST(TensorBoardEvents, Crc32cIsCastagnolisAndTheMaskIsTfRecords) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);  // the CRC-32C check value (RFC 3720, B.4)
  const uint32_t crc = Crc32c("123456789", 9);
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  // The first record's length field (24) and its masked CRC, as TensorBoard wrote them.
  EXPECT_EQ(MaskedCrc32c(Unhex("1800000000000000")), 0x224b7fa3u);
}

TEST(TensorBoardEvents, RecordsAreByteForByteWhatTensorBoardWrites) {
  const std::vector<std::string> ours = OurEvents();
  ASSERT_EQ(ours.size(), kTensorBoardRecords.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(FrameRecord(ours[i]), Unhex(kTensorBoardRecords[i])) << "event " << i;
  }
}

TEST(TensorBoardEvents, ReadRecordsGivesBackWhatWasFramed) {
  std::string file;
  for (const std::string& e : OurEvents()) file += FrameRecord(e);
  auto read = ReadRecords(file);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records, OurEvents());
  EXPECT_FALSE(read->truncated_tail);
  auto empty = ReadRecords("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->records.empty());
  EXPECT_FALSE(empty->truncated_tail);
}

// A writer killed (or a disk filled) in the middle of a record: every whole record before the cut is
// there, and the tail is reported, whatever byte the file ends at.
TEST(TensorBoardEvents, ATruncatedFileKeepsEveryWholeRecord) {
  const std::vector<std::string> events = OurEvents();
  std::string file;
  std::vector<size_t> ends;  // where each record ends
  for (const std::string& e : events) {
    file += FrameRecord(e);
    ends.push_back(file.size());
  }
  for (size_t cut = 0; cut <= file.size(); ++cut) {
    auto read = ReadRecords(std::string_view(file).substr(0, cut));
    ASSERT_TRUE(read.ok()) << "cut at " << cut << ": " << read.status();
    const size_t whole = static_cast<size_t>(std::upper_bound(ends.begin(), ends.end(), cut) - ends.begin());
    ASSERT_EQ(read->records.size(), whole) << "cut at " << cut;
    for (size_t i = 0; i < whole; ++i) EXPECT_EQ(read->records[i], events[i]);
    const bool at_boundary = cut == 0 || std::find(ends.begin(), ends.end(), cut) != ends.end();
    EXPECT_EQ(read->truncated_tail, !at_boundary) << "cut at " << cut;
  }
}

TEST(TensorBoardEvents, AFlippedBitIsDataLoss) {
  const std::string record = FrameRecord(OurEvents()[1]);
  for (size_t i = 0; i < record.size(); ++i) {
    std::string bad = record;
    bad[i] ^= 0x10;
    auto read = ReadRecords(bad);
    ASSERT_FALSE(read.ok()) << "byte " << i;
    EXPECT_EQ(read.status().code(), StatusCode::kDataLoss) << "byte " << i;
  }
}

TEST(TensorBoardEvents, FileNamesCarryTheirSecondsInTenDigits) {
  EXPECT_EQ(EventFileName(1700000000, "node1", 4242, 0), "events.out.tfevents.1700000000.node1.4242.0");
  EXPECT_EQ(EventFileName(5, "h", 1, 2), "events.out.tfevents.0000000005.h.1.2");
  EXPECT_EQ(EventFileSeconds("events.out.tfevents.1700000000.node1.4242.0"), 1700000000);
  EXPECT_EQ(EventFileSeconds("events.out.tfevents.1700000123.host.99.0.v2"), 1700000123);  // TensorFlow 2's
  EXPECT_EQ(EventFileSeconds("events.out.tfevents.1700000124"), 1700000124);
  EXPECT_EQ(EventFileSeconds("events.out.tfevents.x.host"), std::nullopt);
  EXPECT_EQ(EventFileSeconds("events.out.tfevents.12ab.host"), std::nullopt);
  EXPECT_EQ(EventFileSeconds("step-20"), std::nullopt);
  EXPECT_EQ(EventFileSeconds("x.events.out.tfevents.1700000000.h.1.0"), std::nullopt);
}

class EventFileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("eft-tb-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0755);
    fs::remove_all(dir_);
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ + "/run")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

TEST_F(EventFileWriterTest, AFileStartsWithItsVersionAndHoldsEachAppendedEvent) {
  auto w = EventFileWriter::Create(dir_ + "/run", 1700000000.5, "node1", 77);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->path(), dir_ + "/run/events.out.tfevents.1700000000.node1.77.0");
  ASSERT_TRUE((*w)->Append(OurEvents()[1]).ok());
  // Nothing is held back in this process: the file has it all before the writer goes.
  auto bytes = ReadFileToString((*w)->path());
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, Unhex(kTensorBoardRecords[0]) + Unhex(kTensorBoardRecords[1]));
}

// TensorBoard reads a run's files in name order: each new file sorts after those already there, even
// when this node's clock is behind the one that wrote them.
TEST_F(EventFileWriterTest, ANewFileSortsAfterTheOthersWhateverTheClock) {
  EXPECT_EQ(*NextEventFileSeconds(dir_ + "/run", 1000), 1000) << "no directory yet";
  std::vector<std::string> made;
  for (double now : {1700000500.0, 1700000100.0, 1700000100.0, 1700000900.9}) {
    auto w = EventFileWriter::Create(dir_ + "/run", now, "n", 1);
    ASSERT_TRUE(w.ok()) << w.status();
    made.push_back(fs::path((*w)->path()).filename().string());
  }
  EXPECT_EQ(made, (std::vector<std::string>{"events.out.tfevents.1700000500.n.1.0", "events.out.tfevents.1700000501.n.1.0",
                                            "events.out.tfevents.1700000502.n.1.0", "events.out.tfevents.1700000900.n.1.0"}));
  EXPECT_EQ(Names(), made) << "name order is creation order";
  // Other writers' files count too (a PyTorch SummaryWriter's, TensorFlow 2's), other files do not.
  ASSERT_TRUE(WriteStringToFile(dir_ + "/run/events.out.tfevents.1800000000.other.5.0.v2", "").ok());
  ASSERT_TRUE(WriteStringToFile(dir_ + "/run/notes-1900000000.txt", "").ok());
  EXPECT_EQ(*NextEventFileSeconds(dir_ + "/run", 1700001000), 1800000001);
  EXPECT_EQ(*NextEventFileSeconds(dir_ + "/run", 1850000000), 1850000000);
}

// A directory that cannot be made, or a file that cannot be created, is an error naming the path.
TEST_F(EventFileWriterTest, AnUnusableDirectoryIsAnErrorNamingIt) {
  fs::create_directories(dir_);
  ASSERT_TRUE(WriteStringToFile(dir_ + "/file", "").ok());
  auto under_a_file = EventFileWriter::Create(dir_ + "/file/run", 1, "n", 1);
  ASSERT_FALSE(under_a_file.ok());
  EXPECT_NE(under_a_file.status().message().find(dir_ + "/file/run"), std::string::npos) << under_a_file.status();
}

// A read-only directory. Root writes whatever the mode, so as root (CI) the writer runs in a child
// that has become `nobody`; its result comes back through a pipe.
TEST_F(EventFileWriterTest, AReadOnlyDirectoryIsAnError) {
  fs::create_directories(dir_ + "/run");
  ASSERT_EQ(::chmod((dir_ + "/run").c_str(), 0555), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  auto attempt = [&] {
    auto w = EventFileWriter::Create(dir_ + "/run", 1700000000, "n", 1);
    return w.ok() ? std::string("created ") + (*w)->path() : w.status().message();
  };
  std::string result;
  if (::geteuid() != 0) {
    result = attempt();
  } else {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      std::string report = ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0
                               ? std::string("setresuid(nobody) failed")
                               : attempt();
      (void)!::write(fds[1], report.data(), report.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    char buf[1024];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) result.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
  }
  EXPECT_NE(result.find("cannot create " + dir_ + "/run/events.out.tfevents.1700000000.n.1.0: Permission denied"),
            std::string::npos)
      << result;
  EXPECT_TRUE(fs::is_empty(dir_ + "/run"));
}

// A full disk: /dev/full fails every write with ENOSPC.
TEST(TensorBoardEventFile, AFullDiskIsAnErrorNamingThePath) {
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto w = EventFileWriter::FromFd(fd, "/dev/full");
  const Status s = w->Append(EncodeFileVersionEvent(1));
  EXPECT_EQ(s.message(), "cannot write /dev/full: No space left on device");
}

}  // namespace
}  // namespace eft::trainer::tensorboard
