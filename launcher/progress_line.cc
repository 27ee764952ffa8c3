#include "progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace kolo::launcher {
namespace {

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;  // a terminal gone: nothing to keep
    done += static_cast<size_t>(n);
  }
}

int Width(int fd) {
  winsize w{};
  return ioctl(fd, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}

constexpr const char* kEraseLine = "\r\033[K";

}  // namespace

std::string FitToWidth(const std::string& text, int width) {
  // The last column stays empty: a terminal that wraps there would scroll.
  const size_t room = width > 1 ? static_cast<size_t>(width - 1) : 0;
  return text.size() <= room ? text : text.substr(0, room);
}

ProgressLine::ProgressLine(int fd, std::function<std::string()> text)
    : fd_(fd), text_(std::move(text)), next_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { Clear(); }

void ProgressLine::Clear() {
  if (!on_screen_) return;
  WriteAll(fd_, kEraseLine);
  on_screen_ = false;
}

void ProgressLine::Restore() {
  if (!on_screen_ && !shown_.empty()) Draw();
}

void ProgressLine::Update() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return;
  next_ = now + std::chrono::milliseconds(500);
  shown_ = FitToWidth(text_(), Width(fd_));
  Draw();
}

void ProgressLine::Draw() {
  if (shown_.empty()) {
    Clear();
    return;
  }
  WriteAll(fd_, kEraseLine + shown_);
  on_screen_ = true;
}

}  // namespace kolo::launcher
