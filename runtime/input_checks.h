// The checks of every collective's input, made on the calling thread before
// anything is queued: a bad argument fails at once on the rank that made it,
// with a message naming it (Runtime::Enqueue* then tells the other ranks, see
// RuntimeImpl::Refuse). Pure functions of the inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/runtime_types.h"
#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// A tensor's shape, data pointer and dtype; `what` names it in the error.
Status CheckTensor(const TensorView& t, const char* what);
// A tensor with at least one dimension (`why`: what the op does with it).
Status CheckHasDimension(const TensorView& t, const char* op, const char* why);

Status CheckAllreduce(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                      const AllreduceOptions& options);
Status CheckAdasum(const std::vector<TensorView>& inputs, int process_set, const Placement& p);
Status CheckAllgather(const std::vector<TensorView>& inputs);
Status CheckBroadcast(const TensorView& tensor, int root_rank, int n);
Status CheckReducescatter(const std::vector<TensorView>& inputs,
                          const ReducescatterOptions& options);
// The rows `input` sends to each of `n` ranks: `splits`, or an even split
// when empty.
Result<std::vector<int64_t>> AlltoallSplits(const TensorView& input,
                                            const std::vector<int64_t>& splits, int n);

}  // namespace kolo
