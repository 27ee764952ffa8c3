#include "output.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

namespace kolo::launcher {
namespace {

// The part of a tag after "[...]": its stream's word.
int MatchWord(const std::string& s, size_t i, size_t pos, OutputTags tags, bool* is_stderr) {
  static const std::string kOut = "<stdout>:", kErr = "<stderr>:";
  static const std::string kOutSpace = "<stdout>: ", kErrSpace = "<stderr>: ";
  static const std::string kHydra = "<kolorun>:";
  const bool space = tags == OutputTags::kOpenMpiSpace;
  const std::string* words[2] = {space ? &kOutSpace : &kOut, space ? &kErrSpace : &kErr};
  if (tags == OutputTags::kHydra) words[0] = words[1] = &kHydra;
  for (int k = 0; k < 2; ++k) {
    const std::string& word = *words[k];
    size_t n = std::min(word.size(), s.size() - i);
    if (s.compare(i, n, word, 0, n) != 0) continue;
    if (n < word.size()) return -1;
    if (tags != OutputTags::kHydra) *is_stderr = k == 1;
    return static_cast<int>(i + word.size() - pos);
  }
  return 0;
}

// If `s` at `pos` starts with a tag ("[J,R]<stdout>:", "[J,R]<stderr>:" or,
// from Hydra, "[R]<kolorun>:"), returns its length and sets rank (and
// stream, where the tag says it); 0 if not a tag; -1 if `s` ends in what may
// be the start of a tag (need more bytes).
int MatchTag(const std::string& s, size_t pos, OutputTags tags, int* rank, bool* is_stderr) {
  size_t i = pos;
  auto need_more = [&] { return i >= s.size(); };
  if (s[i] != '[') return 0;
  ++i;
  size_t start = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (need_more()) return -1;
  if (tags != OutputTags::kHydra) {  // Open MPI's job number first
    if (i == start || s[i] != ',') return 0;
    ++i;
    start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (need_more()) return -1;
  }
  if (i == start || s[i] != ']') return 0;
  const int r = std::atoi(s.substr(start, i - start).c_str());
  const int n = MatchWord(s, i + 1, pos, tags, is_stderr);
  if (n > 0) *rank = r;
  return n;
}

}  // namespace

void OutputAssembler::Append(int rank, bool is_stderr, const std::string& text,
                             std::vector<OutputLine>* out) {
  std::string& partial = partial_[{rank, is_stderr}];
  for (char c : text) {
    if (c == '\n') {
      out->push_back({rank, is_stderr, partial});
      partial.clear();
    } else {
      partial += c;
    }
  }
}

std::vector<OutputLine> OutputAssembler::Feed(const std::string& bytes, bool from_stderr_pipe) {
  std::vector<OutputLine> out;
  Pipe& p = pipes_[from_stderr_pipe ? 1 : 0];
  if (p.rank < 0) p.is_stderr = from_stderr_pipe;
  p.pending += bytes;
  size_t i = 0, text_start = 0;
  while (i < p.pending.size()) {
    int rank = -1;
    bool is_stderr = from_stderr_pipe;
    int n = p.pending[i] == '[' ? MatchTag(p.pending, i, tags_, &rank, &is_stderr) : 0;
    if (n < 0) break;  // a tag may be cut here; wait for more bytes
    if (n > 0) {
      Append(p.rank, p.is_stderr, p.pending.substr(text_start, i - text_start), &out);
      p.rank = rank;
      p.is_stderr = is_stderr;
      i += n;
      text_start = i;
      continue;
    }
    if (p.pending[i] == '\n' && p.rank >= 0) {
      // Each line is tagged; an untagged line after this one is mpirun's own.
      Append(p.rank, p.is_stderr, p.pending.substr(text_start, i + 1 - text_start), &out);
      p.rank = -1;
      p.is_stderr = from_stderr_pipe;
      text_start = i + 1;
    }
    ++i;
  }
  Append(p.rank, p.is_stderr, p.pending.substr(text_start, i - text_start), &out);
  p.pending.erase(0, i);
  return out;
}

std::vector<OutputLine> OutputAssembler::Flush() {
  std::vector<OutputLine> out;
  for (int k = 0; k < 2; ++k) {
    Append(pipes_[k].rank, pipes_[k].is_stderr, pipes_[k].pending, &out);
    pipes_[k].pending.clear();
  }
  for (auto& [key, text] : partial_) {
    if (!text.empty()) out.push_back({key.first, key.second, text});
  }
  partial_.clear();
  return out;
}

std::string HydraMessage(const std::string& line) {
  if (line.rfind("[mpiexec@", 0) != 0) return "";
  const size_t close = line.find("] ");
  if (close == std::string::npos) return "";
  std::string words = line.substr(close + 2);
  // Where in Hydra's source it was said: "function (path/file.c:123): ".
  const size_t open = words.find(" (");
  const size_t end = words.find("): ");
  if (open != std::string::npos && end != std::string::npos && open < end &&
      words.find(' ') == open) {
    words = words.substr(end + 3);
  }
  return words;
}

bool ParseRankExit(const std::string& line, RankExit* out) {
  const std::string kMarker = "KOLORUN-RANK-EXIT ";
  if (line.rfind(kMarker, 0) != 0) return false;
  std::istringstream is(line.substr(kMarker.size()));
  RankExit e;
  for (std::string word; is >> word;) {
    size_t eq = word.find('=');
    if (eq == std::string::npos) return false;
    std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "rank") e.rank = std::atoi(value.c_str());
    if (key == "host") e.host = value;
    if (key == "code") e.code = std::atoi(value.c_str());
    if (key == "signal") e.signal = std::atoi(value.c_str());
  }
  *out = e;
  return e.rank >= 0;
}

}  // namespace kolo::launcher
