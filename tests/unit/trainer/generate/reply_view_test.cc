// ReplyView (trainer/generate/reply_view.h): what `eft-train generate` / `chat` print of a reply,
// checked on whole replies and on every way a stream can cut them into chunks.
#include "trainer/generate/reply_view.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace eft::trainer {
namespace {

std::string Whole(const std::string& reply, bool dim = false) {
  ReplyView v(dim);
  std::string out = v.Push(reply);
  return out + v.Finish();
}

// The reply streamed one byte at a time, and in chunks of every size: the same display text,
// since a token boundary can fall anywhere (inside "<think>" too).
void ExpectSameInChunks(const std::string& reply, const std::string& shown) {
  for (size_t size = 1; size <= reply.size(); ++size) {
    ReplyView v;
    std::string out;
    for (size_t i = 0; i < reply.size(); i += size) out += v.Push(reply.substr(i, size));
    out += v.Finish();
    EXPECT_EQ(out, shown) << "chunks of " << size;
  }
}

TEST(ReplyView, AnEmptyThinkBlockIsDropped) {
  const std::string reply = "<think>\n\n</think>\n\nThe capital of France is Paris.";
  EXPECT_EQ(Whole(reply), "The capital of France is Paris.");
  ExpectSameInChunks(reply, "The capital of France is Paris.");
}

TEST(ReplyView, ANonEmptyOneIsSetApart) {
  const std::string reply = "<think>\nThe user asks for France's capital.\n</think>\n\nParis.";
  EXPECT_EQ(Whole(reply), "thinking: The user asks for France's capital.\n\nParis.");
  ExpectSameInChunks(reply, "thinking: The user asks for France's capital.\n\nParis.");
  EXPECT_EQ(Whole(reply, /*dim=*/true), "\x1b[2mthinking: The user asks for France's capital.\x1b[0m\n\nParis.");
}

TEST(ReplyView, TextWithoutAThinkBlockIsUnchanged) {
  for (const std::string reply : {"Paris.", "  Paris <b>.", "<thin>", "<", "", "\n\n", "Paris. <think>x</think>"}) {
    EXPECT_EQ(Whole(reply), reply);
    ExpectSameInChunks(reply, reply);
  }
}

TEST(ReplyView, StreamsAsItGoes) {
  ReplyView v;
  EXPECT_EQ(v.Push("<thi"), "") << "may still be <think>";
  EXPECT_EQ(v.Push("nk>\n"), "");
  EXPECT_EQ(v.Push("Let me "), "thinking: Let me") << "trailing space held: the block may end next";
  EXPECT_EQ(v.Push("see.</th"), " see.");
  EXPECT_EQ(v.Push("ink>\n\nPar"), "\n\nPar");
  EXPECT_EQ(v.Push("is."), "is.");
  EXPECT_EQ(v.Finish(), "");
}

TEST(ReplyView, AReplyCutOffWhileThinkingShowsWhatThereIs) {
  EXPECT_EQ(Whole("<think>\nStill thinking about"), "thinking: Still thinking about");
  EXPECT_EQ(Whole("<think>\nStill", /*dim=*/true), "\x1b[2mthinking: Still\x1b[0m");
  EXPECT_EQ(Whole("<think>\n\n"), "") << "nothing thought yet";
}

}  // namespace
}  // namespace eft::trainer
