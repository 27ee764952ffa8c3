#include "logging.h"

#include <unistd.h>

#include <atomic>

namespace kolo {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "TRACE";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
void SetLogRank(int rank) { g_rank = rank; }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void LogLine(LogLevel level, const std::string& message) {
  std::string line = "[kolo";
  if (g_rank >= 0) line += " " + std::to_string(g_rank.load());
  line += std::string(" ") + LevelName(level) + "] " + message + "\n";
  // One write() per line so that lines of different threads never interleave.
  ssize_t rc = ::write(STDERR_FILENO, line.data(), line.size());
  (void)rc;
}

}  // namespace kolo
