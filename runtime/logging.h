// Log lines to stderr, one whole line per write: "[kolo 1 WARNING] message".
//
// The level and the rank prefix are process-wide (set once by Runtime::Create),
// like glog's flags: the one piece of global state besides the runtime itself,
// because ops/ and the coordinator log too.
#pragma once

#include <sstream>
#include <string>

#include "config.h"

namespace kolo {

void SetLogLevel(LogLevel level);
void SetLogRank(int rank);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { LogLine(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace kolo

// A loop that runs once, so the macro is safe inside an unbraced if/else.
#define KOLO_LOG(level)                                                               \
  for (bool kolo_log_on_ = ::kolo::LogEnabled(::kolo::LogLevel::level); kolo_log_on_; \
       kolo_log_on_ = false)                                                          \
  ::kolo::LogMessage(::kolo::LogLevel::level).stream()
