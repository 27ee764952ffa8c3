// What the loop hands the executor, and what the executor hands back: a data
// response with this rank's entries, and each entry once its work finished.
// The executor completes nothing itself; the loop completes what it returns
// (RuntimeImpl::Complete), so that one function marks handles done.
#pragma once

#include <optional>
#include <vector>

#include "message.h"
#include "work.h"

namespace kolo {

// A data response (allreduce, allgather, broadcast, alltoall, reducescatter)
// with this rank's entries, one per name in response order. An allreduce
// member a joined rank does not hold has no entry: the rank reduces zeros.
struct Job {
  Response response;
  std::vector<std::optional<TensorEntry>> entries;
};

// An entry whose work finished (or failed): its status and, for the
// collectives that produce one, its result.
struct Finished {
  TensorEntry entry;
  Status status;
  std::optional<WorkResult> result;
};

}  // namespace kolo
