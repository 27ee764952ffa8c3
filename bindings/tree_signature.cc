#include "tree_signature.h"

#include <algorithm>

namespace kolo {
namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

}  // namespace

std::string FirstDifference(const std::vector<std::string>& every) {
  std::vector<std::vector<std::string_view>> lines;
  size_t leaves = 0;
  for (const std::string& text : every) {
    lines.push_back(Lines(text));
    leaves = std::max(leaves, lines.back().size());
  }
  for (size_t i = 0; i < leaves; ++i) {
    const bool same = std::all_of(lines.begin(), lines.end(), [&](const auto& rank) {
      return i < rank.size() && i < lines[0].size() && rank[i] == lines[0][i];
    });
    if (same) continue;
    std::string details;
    for (size_t r = 0; r < lines.size(); ++r) {
      if (r > 0) details += "; ";
      details += "rank " + std::to_string(r) + ": " +
                 (i < lines[r].size() ? std::string(lines[r][i]) : "(no leaf)");
    }
    return "the first leaf that differs is number " + std::to_string(i) + ": " + details;
  }
  return "";
}

}  // namespace kolo
