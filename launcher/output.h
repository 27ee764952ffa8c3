// Reassembles mpirun's tagged output streams into whole lines per rank.
//
// Open MPI tags every write() of a rank ("[1,3]<stdout>:", --tag-output), and
// so does Hydra with the pattern kolorun gives it ("[3]<kolorun>:", its
// stream known by the pipe it comes on), so an unbuffered print comes out in
// fragments and ranks interleave mid-line. The assembler keeps one partial
// line per (rank, stream) and emits only complete lines.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kolo::launcher {

// How the launcher tags each piece of a rank's output.
enum class OutputTags {
  kOpenMpi,       // ORTE's --tag-output: "[1,3]<stdout>:text"
  kOpenMpiSpace,  // PRRTE's: "[1,3]<stdout>: text" (the space is not the rank's)
  kHydra,         // kHydraTagPattern: "[3]<kolorun>:text", on the pipe of its stream
};
// Hydra's -prepend-pattern for kOutputTags::kHydra (%r: the rank). Words no
// program prints by chance: a line of the rank's own that holds "[0] " is
// not taken for a tag.
inline constexpr const char* kHydraTagPattern = "[%r]<kolorun>:";

struct OutputLine {
  int rank = -1;  // -1: mpirun's own (untagged) output
  bool is_stderr = false;
  std::string text;  // without the newline
};

class OutputAssembler {
 public:
  explicit OutputAssembler(OutputTags tags = OutputTags::kOpenMpi) : tags_(tags) {}

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

  OutputTags tags_;
  Pipe pipes_[2];
  std::map<std::pair<int, bool>, std::string> partial_;
};

// Hydra's own words in one of its lines ("[mpiexec@host] func (file.c:12):
// Launch proxy failed." -> "Launch proxy failed."), or "" when the line is
// not mpiexec's.
std::string HydraMessage(const std::string& line);

// Recognizes kolo-rank's failure marker; returns false for other lines.
struct RankExit {
  int rank = -1;
  std::string host;
  int code = 0;    // exit code, or 0 when killed
  int signal = 0;  // signal number when killed
};
bool ParseRankExit(const std::string& line, RankExit* out);

}  // namespace kolo::launcher
