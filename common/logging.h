// Minimal leveled logging to stderr, safe to use from any thread.
//
//   EFT_LOG(INFO) << "node " << name << " lost: no heartbeat for " << secs << " s";
//
// Each line: "2026-11-21T14:03:07.123Z I controller] message". The program name is set once with
// SetLogProgram(); the threshold with SetLogLevel() (or EFT_LOG_LEVEL=debug|info|warning|error).
#pragma once

#include <sstream>
#include <string>

namespace eft {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogProgram(std::string name);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning"/"warn", "error"; returns false on anything else.
bool ParseLogLevel(const std::string& text, LogLevel* level);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace eft

#define EFT_LOG_LEVEL_DEBUG ::eft::LogLevel::kDebug
#define EFT_LOG_LEVEL_INFO ::eft::LogLevel::kInfo
#define EFT_LOG_LEVEL_WARNING ::eft::LogLevel::kWarning
#define EFT_LOG_LEVEL_ERROR ::eft::LogLevel::kError

namespace eft {
// Turns the stream expression into void so EFT_LOG is one expression: safe inside an unbraced if.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace eft

#define EFT_LOG(level)                                 \
  (EFT_LOG_LEVEL_##level < ::eft::GetLogLevel())       \
      ? (void)0                                        \
      : ::eft::LogVoidify() & ::eft::LogMessage(EFT_LOG_LEVEL_##level).stream()
