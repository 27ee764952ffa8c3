// One rank's counters as the line it sends kolorun once a second over the
// job's rendezvous connection, and kolorun's reading of it. At most
// kMaxSnapshotBytes with its newline: every counter, then the last arrivals
// of at most kMaxLastArrivals ranks (most often last first) and the stalls,
// as many as fit; a line that left some out says so (t=1).
//
//   KOLOM <token> <rank> <host> n=<steps> g=<negotiate us> m=<move us> w=<wait us>
//         c=<op>,<set slot>,<count>,<bytes> ...  l=<rank>,<count> ...
//         s=<set>,<ms>,<missing>,<r-r-r>,<name>,<site> ...
//
// Names and call sites are percent-encoded (space, comma, percent, controls).
#pragma once

#include <string>

#include "kolo/status.h"
#include "metrics.h"

namespace kolo {

constexpr size_t kMaxSnapshotBytes = 1024;
constexpr size_t kMaxLastArrivals = 8;

struct RankSnapshot {
  int rank = -1;
  std::string host;
  MetricsSample sample;
  bool truncated = false;  // some stalls did not fit
};

std::string EncodeSnapshot(const std::string& token, const RankSnapshot& s);
// Parses one line (without its newline) and checks its token.
Result<RankSnapshot> ParseSnapshot(const std::string& line, const std::string& token);

// The name of counted operation `op` (0 .. kCountedOps-1): "allreduce", ...
const char* CountedOpName(int op);

}  // namespace kolo
