// Reassembles mpirun --tag-output streams into whole lines per rank.
//
// Open MPI tags every write() of a rank ("[1,3]<stdout>:"), so an unbuffered
// print comes out in fragments and ranks interleave mid-line. The assembler
// keeps one partial line per (rank, stream) and emits only complete lines.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kolo::launcher {

struct OutputLine {
  int rank = -1;  // -1: mpirun's own (untagged) output
  bool is_stderr = false;
  std::string text;  // without the newline
};

class OutputAssembler {
 public:
  // Open MPI 5 (PRRTE) writes one space after each tag, which is not the rank's.
  explicit OutputAssembler(bool space_after_tag = false) : space_after_tag_(space_after_tag) {}

  // Feeds bytes read from one of mpirun's pipes; returns the completed lines.
  std::vector<OutputLine> Feed(const std::string& bytes, bool from_stderr_pipe);
  // The partial lines still held, as lines (at the end of the job).
  std::vector<OutputLine> Flush();

 private:
  struct Pipe {
    std::string pending;  // bytes not yet parsed (may end in a partial tag)
    int rank = -1;        // whose content follows
    bool is_stderr = false;
  };
  void Append(int rank, bool is_stderr, const std::string& text, std::vector<OutputLine>* out);

  bool space_after_tag_;
  Pipe pipes_[2];
  std::map<std::pair<int, bool>, std::string> partial_;
};

// Recognizes kolo-rank's failure marker; returns false for other lines.
struct RankExit {
  int rank = -1;
  std::string host;
  int code = 0;    // exit code, or 0 when killed
  int signal = 0;  // signal number when killed
};
bool ParseRankExit(const std::string& line, RankExit* out);

}  // namespace kolo::launcher
