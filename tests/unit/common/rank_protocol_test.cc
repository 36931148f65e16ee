// The rank protocol (common/rank_protocol.h): exit classes, reserved environment names, and events
// that survive encode -> decode with every field, as the trainer, the test workload and the
// controller exchange them.
#include "common/rank_protocol.h"

#include <gtest/gtest.h>

namespace eft::rank {
namespace {

TEST(RankProtocolTest, ExitCodesAndClasses) {
  EXPECT_EQ(ToInt(ExitCode::kSuccess), 0);
  EXPECT_EQ(ToInt(ExitCode::kFailure), 1);
  EXPECT_EQ(ToInt(ExitCode::kBadInput), 2);
  EXPECT_EQ(ToInt(ExitCode::kStoppedOnRequest), 75);  // EX_TEMPFAIL: try again later
  EXPECT_EQ(ToInt(ExitCode::kRendezvousPortBusy), 76);
  EXPECT_EQ(ToInt(ExitCode::kStorageFull), 77);
  EXPECT_STREQ(ExitClassName(ClassifyExit(77, 0)), "storage_full");
  EXPECT_STREQ(ExitCodeMeaning(77), "checkpoint storage full");
  EXPECT_EQ(ToInt(ExitCode::kOutOfMemory), 78);
  EXPECT_STREQ(ExitClassName(ClassifyExit(78, 0)), "out_of_memory");
  EXPECT_STREQ(ExitCodeMeaning(78), "out of memory");
  EXPECT_EQ(ToInt(ExitCode::kFenced), 79);
  EXPECT_STREQ(ExitClassName(ClassifyExit(79, 0)), "fenced");
  EXPECT_STREQ(ExitCodeMeaning(79), "fenced off by a newer attempt");
  EXPECT_STREQ(ExitClassName(ClassifyExit(0, 0)), "success");
  EXPECT_STREQ(ExitClassName(ClassifyExit(2, 0)), "bad_input");
  EXPECT_STREQ(ExitClassName(ClassifyExit(75, 0)), "stopped");
  EXPECT_STREQ(ExitClassName(ClassifyExit(76, 0)), "port_busy");
  EXPECT_STREQ(ExitClassName(ClassifyExit(1, 0)), "failed");
  EXPECT_STREQ(ExitClassName(ClassifyExit(137, 0)), "failed");
  EXPECT_STREQ(ExitClassName(ClassifyExit(0, 9)), "signal");  // a signal wins over the code
  EXPECT_STREQ(ExitCodeMeaning(2), "bad configuration or input");
  EXPECT_STREQ(ExitCodeMeaning(75), "stopped after saving a checkpoint");
}

TEST(RankProtocolTest, ReservedEnvironmentNames) {
  for (const char* name : {env::kRank, env::kLocalRank, env::kWorldSize, env::kLocalWorldSize, env::kGroupRank,
                           env::kRoleRank, env::kMasterAddr, env::kMasterPort, env::kRestartCount, env::kRunId,
                           env::kCudaVisibleDevices, env::kJobSpec, env::kResumeFrom, env::kEventsFd, env::kJobId,
                           env::kAttempt, env::kNodeName, env::kNodeAddress, env::kNodesShareLoopback,
                           "EFT_ANYTHING"}) {
    EXPECT_TRUE(IsReservedEnvName(name)) << name;
  }
  // The job may choose its own interfaces (the worker sets NCCL_SOCKET_IFNAME only when it does not).
  for (const char* name : {"HF_HOME", "NCCL_DEBUG", "RANKS", "MY_RANK", "EFT", "eft_x", "NCCL_SOCKET_IFNAME",
                           "GLOO_SOCKET_IFNAME"}) {
    EXPECT_FALSE(IsReservedEnvName(name)) << name;
  }
}

template <typename T>
T RoundTrip(const Event& in) {
  std::string line = EncodeEvent(in);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  auto out = DecodeEvent(line);
  EXPECT_TRUE(out.ok()) << out.status() << " for " << line;
  EXPECT_TRUE(std::holds_alternative<T>(*out)) << line;
  return std::get<T>(*out);
}

TEST(RankProtocolTest, EveryEventRoundTrips) {
  StepEvent step{12, 100, 1.25, 3e-4, 0.75, 4096, 1234.5, 2.5, 0.41, 0.125, 1.5, 0.75, 0.0};
  StepEvent s = RoundTrip<StepEvent>(step);
  EXPECT_DOUBLE_EQ(s.data_s, 0.125);
  EXPECT_DOUBLE_EQ(s.compute_s, 1.5);
  EXPECT_DOUBLE_EQ(s.comm_wait_s, 0.75);
  EXPECT_DOUBLE_EQ(s.optimizer_s, 0.0);  // a measured zero is still reported
  EXPECT_EQ(s.step, 12);
  EXPECT_EQ(s.total_steps, 100);
  EXPECT_DOUBLE_EQ(s.loss, 1.25);
  EXPECT_DOUBLE_EQ(s.lr, 3e-4);
  EXPECT_DOUBLE_EQ(s.grad_norm, 0.75);
  EXPECT_EQ(s.tokens, 4096);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 1234.5);
  EXPECT_DOUBLE_EQ(s.seconds, 2.5);
  EXPECT_DOUBLE_EQ(s.mfu, 0.41);

  CheckpointEvent c = RoundTrip<CheckpointEvent>(CheckpointEvent{"full", 40, "/ckpt/step-40", 1 << 20, 1.5, 0.25});
  EXPECT_EQ(c.kind, "full");
  EXPECT_EQ(c.step, 40);
  EXPECT_EQ(c.path, "/ckpt/step-40");
  EXPECT_EQ(c.bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(c.seconds, 1.5);
  EXPECT_DOUBLE_EQ(c.stall_seconds, 0.25);

  auto f = RoundTrip<CheckpointFailedEvent>(
      CheckpointFailedEvent{"sharded", 60, "writing x: No space left on device", 2, true, 3});
  EXPECT_EQ(f.kind, "sharded");
  EXPECT_EQ(f.step, 60);
  EXPECT_EQ(f.reason, "writing x: No space left on device");
  EXPECT_EQ(f.consecutive, 2);
  EXPECT_TRUE(f.storage_full);
  EXPECT_EQ(f.freed, 3);
  EXPECT_EQ(EventTypeName(Event{f}), "checkpoint_failed");

  auto d = RoundTrip<CheckpointDeletedEvent>(CheckpointDeletedEvent{"/ckpt/step-10", "retention (keep_last)"});
  EXPECT_EQ(d.path, "/ckpt/step-10");
  EXPECT_EQ(d.reason, "retention (keep_last)");

  auto r = RoundTrip<ResumedEvent>(ResumedEvent{40, "sharded", "/ckpt/step-40", 99, 0.5, 1.5});
  EXPECT_EQ(r.step, 40);
  EXPECT_EQ(r.kind, "sharded");
  EXPECT_EQ(r.path, "/ckpt/step-40");
  EXPECT_EQ(r.bytes, 99);
  EXPECT_DOUBLE_EQ(r.verify_seconds, 0.5);
  EXPECT_DOUBLE_EQ(r.load_seconds, 1.5);

  EXPECT_EQ(RoundTrip<FinishedEvent>(FinishedEvent{77}).step, 77);
  EXPECT_EQ(RoundTrip<FinishedEvent>(FinishedEvent{77, "/out/merged"}).merged_model, "/out/merged");
  auto exported = RoundTrip<ExportedEvent>(ExportedEvent{77, "/ckpt/model-q8_0.gguf", "q8_0", 145000000, 5.5});
  EXPECT_EQ(exported.step, 77);
  EXPECT_EQ(exported.path, "/ckpt/model-q8_0.gguf");
  EXPECT_EQ(exported.type, "q8_0");
  EXPECT_EQ(exported.bytes, 145000000);
  EXPECT_DOUBLE_EQ(exported.seconds, 5.5);
  EXPECT_EQ(EncodeEvent(ExportedEvent{5, "/o/model-f16.gguf", "f16", 10}),
            R"({"bytes":10,"event":"exported","path":"/o/model-f16.gguf","step":5,"type":"f16"})");
  EXPECT_FALSE(DecodeEvent(R"({"event":"exported","step":5})").ok()) << "an export without its file says nothing";
  auto err = RoundTrip<ErrorEvent>(ErrorEvent{"model_type 'gpt2' is not supported", 2});
  EXPECT_EQ(err.message, "model_type 'gpt2' is not supported");
  EXPECT_EQ(err.exit_code, 2);
  auto none = RoundTrip<NoValidCheckpointEvent>(NoValidCheckpointEvent{"/ckpt", 3});
  EXPECT_EQ(none.dir, "/ckpt");
  EXPECT_EQ(none.skipped, 3);
  auto m = RoundTrip<MemoryEvent>(MemoryEvent{1, 1000, 2000});
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.persistent_bytes, 1000);
  EXPECT_EQ(m.peak_rss_bytes, 2000);
  // A CRC above 2^31 survives the JSON number.
  auto snap = RoundTrip<MemorySnapshotEvent>(
      MemorySnapshotEvent{137, 1, 4, "/dev/shm/eft/j/step-137/rank-00001-of-00004.safetensors", 5000, 0xF00DBEEFu,
                          0.25, 0.0});
  EXPECT_EQ(snap.step, 137);
  EXPECT_EQ(snap.rank, 1);
  EXPECT_EQ(snap.world_size, 4);
  EXPECT_EQ(snap.path, "/dev/shm/eft/j/step-137/rank-00001-of-00004.safetensors");
  EXPECT_EQ(snap.bytes, 5000);
  EXPECT_EQ(snap.crc32c, 0xF00DBEEFu);
  EXPECT_DOUBLE_EQ(snap.seconds, 0.25);
  EXPECT_DOUBLE_EQ(snap.stall_seconds, 0.0);
  EXPECT_EQ(EventTypeName(Event{snap}), "memory_snapshot");
  auto refused = RoundTrip<MemorySnapshotRefusedEvent>(
      MemorySnapshotRefusedEvent{12, 3, "node2", "needs 310 MiB, 120 MiB of the 1024 MiB budget free"});
  EXPECT_EQ(refused.step, 12);
  EXPECT_EQ(refused.rank, 3);
  EXPECT_EQ(refused.node, "node2");
  EXPECT_EQ(refused.reason, "needs 310 MiB, 120 MiB of the 1024 MiB budget free");
  EXPECT_EQ(EventTypeName(Event{refused}), "memory_snapshot_refused");
  // Without its checksum the worker could not tell a damaged copy: required.
  EXPECT_FALSE(DecodeEvent(R"({"event":"memory_snapshot","step":1,"rank":0,"world_size":1,"path":"/x","bytes":1})").ok());
}

// An eft-train command's exit code for its error: 2 (bad input, not retried) where the input decides.
TEST(RankProtocolTest, ExitCodeForAnErrorIsBadInputWhereTheInputDecides) {
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::NotFound("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::FailedPrecondition("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::DataLoss("x")), 2);
  EXPECT_EQ(ExitCodeFor(Status::IoError("x")), 1);
  EXPECT_EQ(ExitCodeFor(Status::Internal("x")), 1);
}

TEST(RankProtocolTest, TheWireFormatIsTheDocumentedOne) {
  // What a program in another language writes (docs/architecture.md): names, not positions.
  EXPECT_EQ(EncodeEvent(FinishedEvent{5}), R"({"event":"finished","step":5})");
  EXPECT_EQ(EncodeEvent(FinishedEvent{5, "/o/merged"}), R"({"event":"finished","merged_model":"/o/merged","step":5})");
  EXPECT_EQ(EncodeEvent(CheckpointDeletedEvent{"/c/step-1", "retention"}),
            R"({"event":"checkpoint_deleted","path":"/c/step-1","reason":"retention"})");
  // Optional fields that were not measured are left out rather than sent as 0.
  std::string step = EncodeEvent(StepEvent{1});
  EXPECT_EQ(step.find("mfu"), std::string::npos) << step;
  EXPECT_EQ(step.find("total_steps"), std::string::npos) << step;
  EXPECT_EQ(step.find("comm_wait_s"), std::string::npos) << step;
  std::string ckpt = EncodeEvent(CheckpointEvent{"sharded", 1, "/p"});
  EXPECT_EQ(ckpt.find("stall_seconds"), std::string::npos) << ckpt;
  auto decoded = DecodeEvent(ckpt);
  ASSERT_TRUE(decoded.ok());
  EXPECT_LT(std::get<CheckpointEvent>(*decoded).seconds, 0);  // still "not reported"
}

// A fatal error can be anything a rank printed: its size on the wire is bounded, and the cut never
// splits a UTF-8 character (the controller stores the message as text).
TEST(RankProtocolTest, ErrorMessagesAreBoundedAtACharacterBoundary) {
  std::string huge(kMaxErrorMessageBytes - 4, 'x');
  huge += "\xc3\xa9\xc3\xa9\xc3\xa9";  // "ééé" across the limit
  std::string line = EncodeEvent(ErrorEvent{huge, 1});
  auto back = DecodeEvent(line);
  ASSERT_TRUE(back.ok()) << back.status();
  const std::string& message = std::get<ErrorEvent>(*back).message;
  EXPECT_LE(message.size(), kMaxErrorMessageBytes);
  EXPECT_EQ(message.substr(message.size() - 3), "...");
  EXPECT_EQ(message.find("\xc3..."), std::string::npos) << "a UTF-8 sequence was split";
  // Decoding bounds what a foreign program sent, too.
  std::string sent = R"({"event":"error","message":")" + std::string(10000, 'y') + R"("})";
  auto bounded = DecodeEvent(sent);
  ASSERT_TRUE(bounded.ok());
  EXPECT_LE(std::get<ErrorEvent>(*bounded).message.size(), kMaxErrorMessageBytes);
  EXPECT_EQ(std::get<ErrorEvent>(*bounded).exit_code, 1);  // not given: a failure
}

// An attempt's end reason is one line: an error's first line with text, both when a rank sends it and
// when a foreign program sends more; the stack that follows stays in the rank's log.
// Gloo and c10d prefix messages with their source file and line; an end reason leaves them out.
TEST(RankProtocolTest, ErrorMessagesLeaveOutSourceLocations) {
  auto e = RoundTrip<ErrorEvent>(ErrorEvent{
      "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:40122: Connection reset by peer", 1});
  EXPECT_EQ(e.message, "Read error [127.0.0.1]:40122: Connection reset by peer");
  e = RoundTrip<ErrorEvent>(ErrorEvent{"step 7: [/src/c10d/ProcessGroupGloo.cpp:3100] Timed out [x.h:2]", 1});
  EXPECT_EQ(e.message, "step 7: Timed out");
  // Brackets that are not locations stay.
  e = RoundTrip<ErrorEvent>(ErrorEvent{"shape [4, 8] vs [2:3] at [a b.cc:1]", 1});
  EXPECT_EQ(e.message, "shape [4, 8] vs [2:3] at [a b.cc:1]");
}

TEST(RankProtocolTest, ErrorMessagesAreTheirFirstLine) {
  const std::string gloo =
      "\n  [../third_party/gloo/gloo/transport/tcp/pair.cc:144] Gloo connectFullMesh failed with timed out "
      "connecting: remote=[127.0.0.1]:23459  \nException raised from connectFullMesh at "
      "../torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:901 (most recent call first):\nframe #0: "
      "c10::Error::Error(...) + 0x98 (0x7f in libc10.so)\nframe #1: ...";
  const std::string headline =
      "Gloo connectFullMesh failed with timed out connecting: remote=[127.0.0.1]:23459";
  auto sent = DecodeEvent(EncodeEvent(ErrorEvent{gloo, 1}));
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(std::get<ErrorEvent>(*sent).message, headline);
  auto foreign = DecodeEvent(R"({"event":"error","message":"cannot open /data/train.jsonl\r\n  in load_data()\n"})");
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  EXPECT_EQ(std::get<ErrorEvent>(*foreign).message, "cannot open /data/train.jsonl");
  auto blank = DecodeEvent(R"({"event":"error","message":" \n\t\n"})");
  ASSERT_TRUE(blank.ok()) << blank.status();
  EXPECT_EQ(std::get<ErrorEvent>(*blank).message, "");
  // What a blank message encodes to reads back, exit code and all (fuzz/regressions/rank_event).
  auto empty = DecodeEvent(EncodeEvent(ErrorEvent{"\n", 2}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(std::get<ErrorEvent>(*empty).message, "");
  EXPECT_EQ(std::get<ErrorEvent>(*empty).exit_code, 2);
}

TEST(RankProtocolTest, DecodingIsLenientAboutExtrasAndStrictAboutWhatMatters) {
  // Integers written as floats, unknown keys, a missing kind (sharded by default).
  auto e = DecodeEvent(R"({"event":"checkpoint","step":3.0,"path":"/p","extra":[1,2]})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(std::get<CheckpointEvent>(*e).step, 3);
  EXPECT_EQ(std::get<CheckpointEvent>(*e).kind, "sharded");
  // A newer rank's event type passes as unknown.
  auto unknown = DecodeEvent(R"({"event":"calibrated","loss":1.0})");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(std::get<UnknownEvent>(*unknown).type, "calibrated");
  EXPECT_EQ(EventTypeName(*unknown), "calibrated");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not json", "event: not a JSON object"},
      {"[1,2]", "event: not a JSON object"},
      {R"({"step":1})", "event: no string \"event\" naming its type"},
      {R"({"event":7})", "event: no string \"event\" naming its type"},
      {R"({"event":"step"})", "step event: \"step\" is missing"},
      {R"({"event":"step","step":"3"})", "step event: \"step\" is not a number"},
      {R"({"event":"checkpoint","step":3})", "checkpoint event: \"path\" is missing"},
      {R"({"event":"checkpoint","step":3,"path":""})", "checkpoint event: \"path\" is empty"},
      {R"({"event":"checkpoint_deleted"})", "checkpoint_deleted event: \"path\" is missing"},
      {R"({"event":"resumed","step":null})", "resumed event: \"step\" is missing"},
      {R"({"event":"error"})", "error event: \"message\" is missing"},
      // Integers outside their field's type (found by fuzz/rank_event_fuzz.cc: a cast of 1e20 to
      // int64_t is undefined behaviour; an out-of-range integer used to wrap).
      {R"({"event":"step","step":1e20})", "step event: \"step\" is out of range"},
      {R"({"event":"step","step":9223372036854775808})", "step event: \"step\" is out of range"},
      {R"({"event":"step","step":-1e300})", "step event: \"step\" is out of range"},
      {R"({"event":"memory","rank":2147483648})", "memory event: \"rank\" is out of range"},
      {R"({"event":"memory_snapshot","step":1,"rank":0,"world_size":1,"path":"/x","bytes":1,"crc32c":-1})",
       "memory_snapshot event: \"crc32c\" is out of range"},
      {R"({"event":"memory_snapshot","step":1,"rank":0,"world_size":1,"path":"/x","bytes":1,"crc32c":4294967296})",
       "memory_snapshot event: \"crc32c\" is out of range"},
  };
  for (const auto& [line, message] : bad) {
    auto r = DecodeEvent(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_EQ(r.status().message(), message) << line;
  }
}

}  // namespace
}  // namespace eft::rank

namespace eft::rank {
namespace {

// Evaluation (issue 19): {"event":"eval","step":S,"loss":L,"tokens":N,"set":NAME,"index":I}; step
// and loss are required; a rank from before named eval sets sends no set and index: its one set,
// "eval", index 0.
TEST(RankProtocolTest, EvalEventsRoundTripAndNeedStepAndLoss) {
  EXPECT_EQ(EncodeEvent(EvalEvent{40, 1.5, 1200}),
            R"({"event":"eval","index":0,"loss":1.5,"set":"eval","step":40,"tokens":1200})");
  auto old = DecodeEvent(R"({"event":"eval","loss":1.5,"step":40,"tokens":1200})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(std::get<EvalEvent>(*old).set, "eval");
  EXPECT_EQ(std::get<EvalEvent>(*old).index, 0);
  EXPECT_FALSE(DecodeEvent(R"({"event":"eval","step":3,"loss":1.0,"set":7})").ok());
  auto back = DecodeEvent(EncodeEvent(EvalEvent{40, 1.25, 1200, 3.5}));
  ASSERT_TRUE(back.ok()) << back.status();
  const EvalEvent& e = std::get<EvalEvent>(*back);
  EXPECT_EQ(e.step, 40);
  EXPECT_DOUBLE_EQ(e.loss, 1.25);
  EXPECT_EQ(e.tokens, 1200);
  EXPECT_DOUBLE_EQ(e.seconds, 3.5);
  EXPECT_EQ(EventTypeName(e), "eval");
  EXPECT_FALSE(DecodeEvent(R"({"event":"eval","loss":1.0})").ok());
  EXPECT_FALSE(DecodeEvent(R"({"event":"eval","step":3})").ok());
  EXPECT_FALSE(DecodeEvent(R"({"event":"eval","step":3,"loss":"low"})").ok());
}

}  // namespace
}  // namespace eft::rank
