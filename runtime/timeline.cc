#include "timeline.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace kolo {
namespace {

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

constexpr char kTail[] = "\n]\n";

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string TimelineRow(const Request& request) {
  if (request.unnamed() || request.op > OpType::kReducescatter) return request.name;
  return std::string(OpTypeName(request.op)) + "." + request.name;
}

std::string NegotiatePhase(OpType op) { return "NEGOTIATE_" + ExecutePhase(op); }

std::string ExecutePhase(OpType op) { return Upper(OpTypeName(op)); }

Timeline::~Timeline() { Stop(); }

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  MutexLock lock(&mutex_);
  if (file_ != nullptr) return Status::PreconditionFailed("a timeline is already being written");
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    return Status::InvalidArgument("cannot write the timeline to '" + path +
                                   "': " + std::strerror(errno));
  }
  first_event_ = true;
  start_ = Clock::now();
  tids_.clear();
  std::fputs("[", file_);
  std::fputs(kTail, file_);
  std::fflush(file_);
  tail_written_ = true;
  mark_cycles_ = mark_cycles;
  active_ = true;
  return Status::OK();
}

void Timeline::Stop() {
  MutexLock lock(&mutex_);
  if (file_ == nullptr) return;
  active_ = false;
  mark_cycles_ = false;
  if (!tail_written_) std::fputs(kTail, file_);
  std::fclose(file_);
  file_ = nullptr;
}

long Timeline::Micros(Clock::time_point t) const {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(t - start_).count());
}

void Timeline::WriteEvent(const std::string& json) {
  // Overwrite the closing bracket left by the last Flush(), then append.
  if (tail_written_) {
    std::fseek(file_, -static_cast<long>(sizeof(kTail) - 1), SEEK_END);
    tail_written_ = false;
  }
  if (!first_event_) std::fputs(",", file_);
  first_event_ = false;
  std::fputs("\n", file_);
  std::fputs(json.c_str(), file_);
}

int Timeline::TidFor(const std::string& tensor) {
  auto it = tids_.find(tensor);
  if (it != tids_.end()) return it->second;
  int tid = static_cast<int>(tids_.size()) + 1;
  tids_.emplace(tensor, tid);
  WriteEvent(R"({"name":"thread_name","ph":"M","pid":0,"tid":)" + std::to_string(tid) +
             R"(,"args":{"name":")" + JsonEscape(tensor) + R"("}})");
  return tid;
}

void Timeline::Span(const std::string& tensor, const std::string& phase, Clock::time_point begin,
                    Clock::time_point end) {
  MutexLock lock(&mutex_);
  if (file_ == nullptr) return;
  int tid = TidFor(tensor);
  long ts = Micros(begin);
  long dur = std::max(0L, Micros(end) - ts);
  WriteEvent(R"({"name":")" + JsonEscape(phase) + R"(","ph":"X","pid":0,"tid":)" +
             std::to_string(tid) + ",\"ts\":" + std::to_string(ts) +
             ",\"dur\":" + std::to_string(dur) + "}");
}

void Timeline::Instant(const char* name, Clock::time_point at) {
  MutexLock lock(&mutex_);
  if (file_ == nullptr) return;
  WriteEvent(std::string(R"({"name":")") + name + R"(","ph":"i","s":"g","pid":0,"tid":0,"ts":)" +
             std::to_string(Micros(at)) + "}");
}

void Timeline::Flush() {
  if (!active()) return;
  MutexLock lock(&mutex_);
  if (file_ == nullptr || tail_written_) return;
  std::fputs(kTail, file_);
  std::fflush(file_);
  tail_written_ = true;
}

}  // namespace kolo
