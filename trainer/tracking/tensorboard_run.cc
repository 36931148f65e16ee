#include "trainer/tracking/tensorboard_run.h"

#include <unistd.h>

#include <type_traits>
#include <variant>
#include <vector>

#include "common/logging.h"

namespace eft::trainer {
namespace {

using tensorboard::Scalar;
using tensorboard::SessionStatus;

void WarnOff(const Status& s) {
  EFT_LOG(WARNING) << "TensorBoard: " << s.message() << "; no more TensorBoard events in this attempt "
                   << "(training goes on; docs/tracking.md)";
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  std::string name = host;
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

}  // namespace

std::string TensorBoardDir(const std::string& setting, const std::string& checkpoint_dir) {
  if (setting == "off") return "";
  if (!setting.empty()) return setting;
  return checkpoint_dir.empty() ? "" : checkpoint_dir + "/tensorboard";
}

std::unique_ptr<TensorBoardRun> TensorBoardRun::Start(const std::string& dir, const TensorBoardAttempt& attempt,
                                                      const Clock* clock) {
  if (dir.empty()) return nullptr;
  auto writer = tensorboard::EventFileWriter::Create(dir, static_cast<double>(clock->WallMillis()) / 1000,
                                                     HostName(), static_cast<int>(::getpid()));
  if (!writer.ok()) {
    WarnOff(writer.status());
    return std::make_unique<TensorBoardRun>(nullptr, attempt, clock);
  }
  EFT_LOG(INFO) << "TensorBoard: this attempt's curves go to " << (*writer)->path() << " (tensorboard --logdir "
                << dir << ")";
  return std::make_unique<TensorBoardRun>(std::move(*writer), attempt, clock);
}

TensorBoardRun::TensorBoardRun(std::unique_ptr<tensorboard::EventFileWriter> writer, const TensorBoardAttempt& attempt,
                               const Clock* clock)
    : attempt_(attempt), clock_(clock), path_(writer != nullptr ? writer->path() : "") {
  MutexLock lock(&mu_);
  writer_ = std::move(writer);
  WriteStart();
}

double TensorBoardRun::WallTime() const { return static_cast<double>(clock_->WallMillis()) / 1000; }

void TensorBoardRun::Write(const std::string& event) {
  if (writer_ == nullptr) return;
  if (Status s = writer_->Append(event); !s.ok()) {
    WarnOff(s);
    writer_.reset();
  }
}

void TensorBoardRun::WriteStart() {
  const int64_t step = StartStep(attempt_.resumed_step);
  const std::string msg = "eft attempt " + std::to_string(attempt_.attempt) + ", world size " +
                          std::to_string(attempt_.world_size) +
                          (attempt_.resumed_step > 0 ? ", resumed after step " + std::to_string(attempt_.resumed_step)
                                                     : std::string(", from the start"));
  Write(tensorboard::EncodeSessionLogEvent(WallTime(), step, SessionStatus::kStart, msg));
  Write(tensorboard::EncodeScalarsEvent(WallTime(), step,
                                        {{"eft/attempt", static_cast<float>(attempt_.attempt)},
                                         {"eft/world_size", static_cast<float>(attempt_.world_size)}}));
}

void TensorBoardRun::Observe(const rank::Event& event) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, rank::StepEvent>) {
          std::vector<Scalar> values = {{"train/loss", static_cast<float>(e.loss)},
                                        {"train/learning_rate", static_cast<float>(e.lr)},
                                        {"train/grad_norm", static_cast<float>(e.grad_norm)},
                                        {"train/tokens_per_second", static_cast<float>(e.tokens_per_s)}};
          if (e.mfu > 0) values.push_back({"train/mfu", static_cast<float>(e.mfu)});
          MutexLock lock(&mu_);
          Write(tensorboard::EncodeScalarsEvent(WallTime(), e.step, values));
        } else if constexpr (std::is_same_v<T, rank::EvalEvent>) {
          MutexLock lock(&mu_);
          Write(tensorboard::EncodeScalarsEvent(WallTime(), e.step,
                                                {{"eval/" + e.set + "/loss", static_cast<float>(e.loss)}}));
        } else if constexpr (std::is_same_v<T, rank::FinishedEvent>) {
          End(e.step, "finished");
        }
      },
      event);
}

void TensorBoardRun::End(int64_t step, std::string_view how) {
  MutexLock lock(&mu_);
  // An attempt that trained nothing (resumed at the last step) leaves the points where they are.
  if (step >= StartStep(attempt_.resumed_step)) {
    Write(tensorboard::EncodeScalarsEvent(WallTime(), step,
                                          {{"eft/attempt", static_cast<float>(attempt_.attempt)},
                                           {"eft/world_size", static_cast<float>(attempt_.world_size)}}));
  }
  Write(tensorboard::EncodeSessionLogEvent(WallTime(), step, SessionStatus::kStop,
                                           "eft attempt " + std::to_string(attempt_.attempt) + " " + std::string(how)));
  writer_.reset();
}

bool TensorBoardRun::enabled() const {
  MutexLock lock(&mu_);
  return writer_ != nullptr;
}

}  // namespace eft::trainer
