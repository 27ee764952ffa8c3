#include "usage.h"

#include <algorithm>

namespace kolo::launcher {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

bool LooksLikeOption(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' && arg != "--";
}

std::string NearestName(const std::string& name, const std::vector<std::string>& known) {
  const std::string bare = name.substr(0, name.find('='));
  // Distances in half steps: a name that `bare` begins ("-n" of "-np",
  // "--hierarchical" of "--hierarchical-allreduce") beats one edit away.
  std::string best;
  size_t best_half_steps = 0;
  for (const std::string& k : known) {
    size_t half_steps = 2 * EditDistance(bare, k);
    if (bare.size() >= 2 && k.size() > bare.size() && k.rfind(bare, 0) == 0) half_steps = 1;
    if (best.empty() || half_steps < best_half_steps) {
      best = k;
      best_half_steps = half_steps;
    }
  }
  // Beyond about a third of the name, a suggestion is a guess.
  const size_t limit = std::max<size_t>(2, bare.size() / 3);
  return best_half_steps <= 2 * limit ? best : "";
}

std::string UnknownOptionMessage(const std::string& arg, const std::vector<std::string>& known) {
  const std::string bare = arg.substr(0, arg.find('='));
  const std::string nearest = NearestName(bare, known);
  std::string message = "unknown option '" + bare + "'";
  if (!nearest.empty()) message += "; did you mean '" + nearest + "'?";
  return message +
         " (kolorun --help lists its options; the program's own options go after the "
         "program's name, or after --)";
}

}  // namespace kolo::launcher
