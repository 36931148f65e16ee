#include "cli/progress_view.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace eft::cli {
namespace {

using google::protobuf::util::TimeUtil;

// Cursor up one line per block line, to the first column; then each line is cleared as it is
// rewritten, so a shorter line leaves nothing of the longer one behind.
constexpr char kClearLine[] = "\r\x1b[2K";

std::string Num(double v, const char* fmt = "%.4g") {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string State(v1::JobState s) { return v1::JobState_Name(s).substr(sizeof("JOB_STATE_") - 1); }

bool HasStep(const v1::Job& j) { return j.has_progress() && j.progress().step() > 0; }

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// "job 1 (capitals) RUNNING attempt 1 world 2", with the reason when the job is not running.
std::string StateText(const v1::Job& j, const char* sep) {
  std::string s = "job " + j.id();
  if (!j.spec().name().empty()) s += " (" + j.spec().name() + ")";
  s += sep + State(j.state());
  if (j.attempt()) s += sep + std::string("attempt ") + std::to_string(j.attempt());
  if (j.world_size()) s += sep + std::string("world ") + std::to_string(j.world_size());
  if (!j.reason().empty() && j.state() != v1::JOB_STATE_RUNNING) s += sep + ("(" + j.reason() + ")");
  return s;
}

// "loss 0.509  eval loss 0.6013 (step 40)  1234 tokens/s (MFU 41.2%)"; the MFU where the trainer
// knows its device's peak (docs/gpu.md, "MFU").
std::string MetricsText(const v1::Job& j, const char* sep) {
  std::string s = "loss " + (HasStep(j) ? Num(j.progress().loss()) : std::string("-"));
  if (j.has_progress() && j.progress().evals_size() > 1) {
    // "eval loss new 0.41, known 1.20 (step 40)"
    s += sep + std::string("eval loss ");
    for (int i = 0; i < j.progress().evals_size(); ++i) {
      const v1::EvalLoss& e = j.progress().evals(i);
      s += (i > 0 ? ", " : "") + e.set() + " " + Num(e.loss());
    }
    s += " (step " + std::to_string(j.progress().eval_step()) + ")";
  } else if (j.has_progress() && j.progress().has_eval_loss()) {
    s += sep + std::string("eval loss ") + Num(j.progress().eval_loss()) + " (step " +
         std::to_string(j.progress().eval_step()) + ")";
  }
  if (HasStep(j) && j.progress().tokens_per_s() > 0) {
    s += sep + Num(j.progress().tokens_per_s(), "%.0f") + " tokens/s";
    if (j.progress().mfu() > 0) s += " (MFU " + Num(100 * j.progress().mfu(), "%.1f") + "%)";
  }
  return s;
}

std::string StepText(const v1::Job& j) {
  const auto& p = j.progress();
  std::string s = std::to_string(p.step());
  if (p.total_steps() > 0) s += "/" + std::to_string(p.total_steps());
  return s;
}

std::string Percent(const v1::Job& j) {
  const auto& p = j.progress();
  return Num(100.0 * static_cast<double>(p.step()) / static_cast<double>(p.total_steps()), "%.0f") + "%";
}

}  // namespace

std::string ProgressView::Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  }
  return buf;
}

std::string ProgressView::Fit(const std::string& text, int columns) {
  if (columns <= 0) return "";
  // Counts code points, not bytes: a node name or a message may be UTF-8.
  auto starts = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; };
  int count = 0;
  for (char c : text) count += starts(c);
  if (count <= columns) return text;
  const int keep = columns > 3 ? columns - 3 : columns;
  int seen = 0;
  size_t cut = 0;
  for (; cut < text.size(); ++cut) {
    if (starts(text[cut]) && seen++ == keep) break;
  }
  return text.substr(0, cut) + (columns > 3 ? "..." : "");
}

std::vector<std::string> ProgressView::Frame(const v1::Job& j, double eta_s, int width) {
  const int columns = std::max(1, width - 1);  // the last column would wrap on some terminals
  std::vector<std::string> lines;
  lines.push_back(StateText(j, "  "));

  std::string progress;
  if (!HasStep(j)) {
    progress = Terminal(j.state()) ? "no steps reported" : "waiting for the first step";
  } else if (j.progress().total_steps() <= 0) {
    progress = "step " + StepText(j);
  } else {
    const auto& p = j.progress();
    std::string suffix = " " + StepText(j) + "  " + Percent(j);
    if (eta_s >= 0 && !Terminal(j.state())) suffix += "  ETA " + Duration(eta_s);
    const int bar = std::min<int>(40, columns - 2 - static_cast<int>(suffix.size()));
    if (bar >= 10) {
      const double done = std::clamp(static_cast<double>(p.step()) / static_cast<double>(p.total_steps()), 0.0, 1.0);
      const int filled = static_cast<int>(done * bar);
      std::string cells(static_cast<size_t>(bar), ' ');
      for (int i = 0; i < filled; ++i) cells[i] = '=';
      if (filled < bar && filled > 0) cells[filled] = '>';
      progress = "[" + cells + "]" + suffix;
    } else {
      progress = "step" + suffix;
    }
  }
  lines.push_back(progress);
  lines.push_back(MetricsText(j, "  "));
  if (j.events_size() > 0) {
    const auto& e = j.events(j.events_size() - 1);
    lines.push_back("last event: " + e.type() + ": " + e.message());
  } else {
    lines.push_back("last event: -");
  }
  for (auto& l : lines) l = Fit(l, columns);
  return lines;
}

double ProgressView::EtaSeconds(const v1::Job& j) {
  if (!HasStep(j)) return -1;
  const auto& p = j.progress();
  const int64_t ms = p.has_time() ? TimeUtil::TimestampToMilliseconds(p.time()) : 0;
  // The pace of this attempt only: a restart resumes at an older step, after a pause.
  if (j.attempt() != pace_attempt_ || p.step() < pace_step_ || pace_ms_ == 0) {
    pace_attempt_ = j.attempt();
    pace_step_ = p.step();
    pace_ms_ = ms;
    return -1;
  }
  if (p.total_steps() <= p.step() || p.step() <= pace_step_ || ms <= pace_ms_) return -1;
  const double per_step = static_cast<double>(ms - pace_ms_) / 1000.0 / static_cast<double>(p.step() - pace_step_);
  return per_step * static_cast<double>(std::max<int64_t>(0, p.total_steps() - p.step()));
}

std::string ProgressView::Draw(const v1::Job& j, int width) {
  const double eta = EtaSeconds(j);
  std::string frame;
  for (const auto& line : Frame(j, eta, width)) frame += kClearLine + line + "\n";
  if (drawn_ && frame == frame_) return "";  // WatchJob also sends changes the block does not show
  std::string out = drawn_ ? "\x1b[" + std::to_string(kBlockLines) + "A" + frame : frame;
  frame_ = frame;
  drawn_ = true;
  return out;
}

std::string ProgressView::Update(const v1::Job& job, double now_s, int width) {
  if (mode_ == Mode::kLines) return Lines(job, now_s, /*final=*/false);
  last_ = job;
  return Draw(job, width);
}

std::string ProgressView::Finish(const v1::Job& job, double now_s, int width) {
  if (mode_ == Mode::kLines) return Lines(job, now_s, /*final=*/true);
  last_ = job;
  return Draw(job, width);
}

std::string ProgressView::Clear() {
  if (mode_ != Mode::kTerminal || !drawn_) return "";
  drawn_ = false;
  return "\x1b[" + std::to_string(kBlockLines) + "A\r\x1b[J";
}

std::string ProgressView::Redraw(int width) {
  if (mode_ != Mode::kTerminal || last_.id().empty()) return "";
  return Draw(last_, width);
}

std::string ProgressView::Lines(const v1::Job& j, double now_s, bool final) {
  const double eta = EtaSeconds(j);
  std::string state;
  const std::string key = State(j.state()) + " " + std::to_string(j.attempt()) + " " + std::to_string(j.world_size());
  if (key != state_key_) {
    state = StateText(j, " ") + "\n";
    state_key_ = key;
  }
  std::string events;
  int first = events_seen_;
  if (first < 0) {
    first = std::max(0, j.events_size() - kBacklogEvents);
    if (first > 0) {
      events += "job " + j.id() + ": " + std::to_string(first) + " earlier events (eftctl job describe " + j.id() + ")\n";
    }
  }
  for (int i = std::min(first, j.events_size()); i < j.events_size(); ++i) {
    events += "job " + j.id() + " event " + j.events(i).type() + ": " + j.events(i).message() + "\n";
  }
  events_seen_ = j.events_size();

  std::string progress;
  if (HasStep(j) && j.progress().step() != printed_step_) {
    const auto& p = j.progress();
    const int64_t tenth = p.total_steps() > 0 ? p.step() * 10 / p.total_steps() : -1;
    const bool due = final || Terminal(j.state()) || printed_step_ < 0 || tenth != printed_tenth_ ||
                     now_s - printed_at_ >= kProgressEverySeconds;
    if (due) {
      progress = "job " + j.id() + " step " + StepText(j);
      if (p.total_steps() > 0) progress += " (" + Percent(j) + ")";
      progress += " " + MetricsText(j, " ");
      if (eta >= 0 && !Terminal(j.state())) progress += " ETA " + Duration(eta);
      progress += "\n";
      printed_step_ = p.step();
      printed_tenth_ = tenth;
      printed_at_ = now_s;
    }
  }
  // The story in the order it happened: a job that ended made its last steps, then ended.
  return Terminal(j.state()) ? progress + events + state : state + events + progress;
}

}  // namespace eft::cli
