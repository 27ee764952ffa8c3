// kolorun's status line on a terminal: one line at the bottom, rewritten in
// place (steps/s, slowest rank, bytes/s, elapsed), taken off before the
// ranks' whole lines are written and put back after them, so that the two
// never share a line.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace kolo::launcher {

class ProgressLine {
 public:
  // `fd`: the terminal (stderr); `text`: the line's current text ("" = none).
  ProgressLine(int fd, std::function<std::string()> text);
  ~ProgressLine();  // takes the line off
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Before output: takes the line off the terminal.
  void Clear();
  // After output: puts the last text back.
  void Restore();
  // Reads the text again (at most twice a second) and redraws it.
  void Update();

 private:
  void Draw();
  int fd_;
  std::function<std::string()> text_;
  std::string shown_;
  bool on_screen_ = false;
  std::chrono::steady_clock::time_point next_;
};

// What a terminal of `width` columns shows of `text` (cut to fit).
std::string FitToWidth(const std::string& text, int width);

}  // namespace kolo::launcher
