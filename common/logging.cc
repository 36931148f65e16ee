#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace eft {
namespace {

// Also keeps two lines from interleaving on stderr.
Mutex g_mu;
std::string g_program GUARDED_BY(g_mu) = "eft";

LogLevel InitialLevel() {
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("EFT_LOG_LEVEL")) ParseLogLevel(env, &level);
  return level;
}

std::atomic<LogLevel> g_level{InitialLevel()};

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
  }
  return '?';
}

}  // namespace

void SetLogProgram(std::string name) {
  MutexLock lock(&g_mu);
  g_program = std::move(name);
}

void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(std::memory_order_relaxed); }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  if (text == "debug") *level = LogLevel::kDebug;
  else if (text == "info") *level = LogLevel::kInfo;
  else if (text == "warning" || text == "warn") *level = LogLevel::kWarning;
  else if (text == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

LogMessage::~LogMessage() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  MutexLock lock(&g_mu);
  std::fprintf(stderr, "%s.%03dZ %c %s] %s\n", stamp, millis, LevelLetter(level_), g_program.c_str(),
               stream_.str().c_str());
  std::fflush(stderr);
}

}  // namespace eft
