// ProgressView: what `eftctl job submit --follow`, `job watch` and `job logs -f` show of a running
// job. Pure: it is given job snapshots (as WatchJob sends them) and the time, and returns the text to
// write; the caller owns stdout, the clock and the terminal's width. So what a person sees is
// decided here and unit-tested on its exact output.
//
// Two modes (docs/api.md is the REST side; README.md, "A short tour", shows both):
// - kTerminal (stdout is a TTY): one status block of kBlockLines lines (state, attempt, world size;
//   a progress bar with step/total and ETA; loss, eval loss, tokens/s; the last event), drawn once
//   and then redrawn in place with ANSI cursor movements, as kubectl, docker and tqdm do. Every line
//   is cut to width - 1 columns, so no line wraps and the redraw never drifts.
// - kLines (a pipe, a CI log, -o json): a line per state change (state, attempt or world size), a
//   line per new job event, and a progress line only when the step crossed another tenth of
//   total_steps or kProgressEverySeconds passed since the last one; so a job prints a bounded
//   number of lines however many steps it has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eft/v1/job.pb.h"

namespace eft::cli {

class ProgressView {
 public:
  enum class Mode { kTerminal, kLines };
  static constexpr int kBlockLines = 4;
  static constexpr double kProgressEverySeconds = 30;
  // Events already in the first snapshot (a job being watched late) are shown up to this many.
  static constexpr int kBacklogEvents = 10;

  explicit ProgressView(Mode mode) : mode_(mode) {}

  // The text to write for this snapshot, seen at `now_s` (seconds on any steady clock), for a
  // terminal `width` columns wide (kTerminal only); "" when nothing needs writing.
  std::string Update(const v1::Job& job, double now_s, int width = 80);
  // The text that ends the display after the last snapshot: the final frame left on the screen
  // (kTerminal), or the last progress line and final state when they were not printed (kLines).
  std::string Finish(const v1::Job& job, double now_s, int width = 80);

  // kTerminal: erases the block and leaves the cursor where it began, so other text (log lines)
  // can be written there; Redraw() then draws the block again below it. "" in kLines mode or
  // before the first frame.
  std::string Clear();
  std::string Redraw(int width);

  // The block's lines for `job` (kTerminal), each at most width - 1 columns. `eta_s` < 0: unknown.
  static std::vector<std::string> Frame(const v1::Job& job, double eta_s, int width);
  // "1h02m", "3m05s", "42s".
  static std::string Duration(double seconds);
  // `text` cut to at most `columns` characters (UTF-8 aware), ending in "..." when cut.
  static std::string Fit(const std::string& text, int columns);

 private:
  double EtaSeconds(const v1::Job& job);
  std::string Draw(const v1::Job& job, int width);
  std::string Lines(const v1::Job& job, double now_s, bool final);

  const Mode mode_;
  bool drawn_ = false;  // kTerminal: a block is on the screen below the cursor
  std::string frame_;   // kTerminal: the text of the block on the screen
  v1::Job last_;        // the newest snapshot
  // The state line last printed: state, attempt, world size (kLines).
  std::string state_key_;
  int events_seen_ = -1;  // how many of the job's events were shown; -1 before the first snapshot
  // The last progress line printed (kLines): its step, its tenth of total_steps and when.
  int64_t printed_step_ = -1;
  int64_t printed_tenth_ = -1;
  double printed_at_ = 0;
  // Where the pace is measured from: the first step seen of the current attempt and its time.
  int32_t pace_attempt_ = -1;
  int64_t pace_step_ = 0;
  int64_t pace_ms_ = 0;
};

}  // namespace eft::cli
