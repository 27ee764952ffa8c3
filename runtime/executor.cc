#include "executor.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "../ops/cpu_kernels.h"
#include "fusion_planner.h"
#include "logging.h"

namespace kolo {
namespace {

// The factor applied after the reduction: the user's postscale, and 1/n for
// an average.
double PostFactor(const Response& r, int size) {
  return r.postscale * (r.reduce_op == ReduceOp::kAverage ? 1.0 / size : 1.0);
}

int64_t RowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t RowBytes(const std::vector<int64_t>& shape, DataType dtype) {
  return RowElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
}

// Rows per rank (allgather's dim 0 of every rank, alltoall's splits) as bytes.
std::vector<int64_t> RowsToBytes(const std::vector<int64_t>& rows, int64_t row_bytes) {
  std::vector<int64_t> bytes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) bytes[i] = rows[i] * row_bytes;
  return bytes;
}

// `shape` with dimension 0 replaced by the sum of `rows`: the output of an
// allgather or alltoall.
std::vector<int64_t> StackedShape(std::vector<int64_t> shape, const std::vector<int64_t>& rows) {
  shape[0] = 0;
  for (int64_t r : rows) shape[0] += r;
  return shape;
}

// Elements of each rank's block of a reducescatter of `shape` over n ranks.
std::vector<int64_t> BlockCounts(const std::vector<int64_t>& shape, int n) {
  std::vector<int64_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = SplitRows(shape[0], n, i) * RowElements(shape);
  return counts;
}

}  // namespace

void Executor::Phase(const TensorEntry& e, const char* phase, Clock::time_point begin) {
  if (timeline_ != nullptr && timeline_->active()) {
    timeline_->Span(e.request.name, phase, begin, Clock::now());
  }
}

void Executor::Finish(TensorEntry entry, const Status& status, WorkResult* result) {
  if (timeline_ != nullptr && timeline_->active()) {
    timeline_->Span(entry.request.name, "QUEUE", entry.enqueued, entry.picked_up);
    timeline_->Span(entry.request.name, "NEGOTIATE", entry.picked_up, entry.negotiated);
  }
  on_done_(entry);
  entry.work->Complete(status, entry.part, result);
}

void Executor::Execute(ProcessSet& set, const std::vector<Response>& responses,
                       const std::function<Result<int>(const std::vector<int>&)>& add_set,
                       const std::function<Status(int)>& remove_set,
                       const std::function<const Request*(const std::string&)>& held_elsewhere) {
  auto now = Clock::now();
  for (const Response& r : responses) {
    for (const std::string& name : r.names) {
      if (TensorEntry* e = set.Find(name)) e->negotiated = now;
    }
  }
  for (const Response& r : FusionPlanner::Plan(responses, config_.fusion_threshold_bytes,
                                               config_.in_place_threshold_bytes)) {
    if (r.device != kCpuDevice &&
        (r.op == OpType::kAllreduce || r.op == OpType::kAllgather || r.op == OpType::kBroadcast ||
         r.op == OpType::kAlltoall || r.op == OpType::kReducescatter)) {
      ExecuteGpu(set, r);
      continue;
    }
    switch (r.op) {
      case OpType::kAllreduce:
        Allreduce(set, r);
        break;
      case OpType::kAllgather:
        Allgather(set, r);
        break;
      case OpType::kBroadcast:
        Broadcast(set, r);
        break;
      case OpType::kAlltoall:
        Alltoall(set, r);
        break;
      case OpType::kReducescatter:
        Reducescatter(set, r);
        break;
      case OpType::kError:
        for (const std::string& name : r.names) {
          if (set.Find(name) != nullptr) {
            Finish(set.Take(name), Status::PreconditionFailed(r.error));
          }
        }
        break;
      case OpType::kMissing: {
        // The coordinator waits for this rank. Holding the name on another
        // set is a mismatch the coordinator can only see if it is told.
        const bool asked = std::find(r.ranks.begin(), r.ranks.end(), set.rank()) != r.ranks.end();
        const Request* other =
            asked && set.Find(r.names[0]) == nullptr ? held_elsewhere(r.names[0]) : nullptr;
        if (other != nullptr) {
          Request answer = *other;
          answer.rank = set.rank();
          set.Announce(std::move(answer));
        }
        break;
      }
      case OpType::kBarrier:
        // Negotiation already proved that every rank reached the barrier.
        if (set.Find(r.names[0]) != nullptr) Finish(set.Take(r.names[0]), Status::OK());
        break;
      case OpType::kJoin: {
        if (set.Find(r.names[0]) == nullptr) break;
        WorkResult result;
        result.value = r.value;
        Finish(set.Take(r.names[0]), Status::OK(), &result);
        break;
      }
      case OpType::kAddProcessSet: {
        Result<int> id = add_set(r.ranks);
        WorkResult result;
        if (id.ok()) result.value = id.value();
        if (set.Find(r.names[0]) != nullptr) {
          Finish(set.Take(r.names[0]), id.status(), &result);
        }
        break;
      }
      case OpType::kRemoveProcessSet: {
        Status s = remove_set(r.ranks.empty() ? -1 : r.ranks[0]);
        if (set.Find(r.names[0]) != nullptr) Finish(set.Take(r.names[0]), s);
        break;
      }
    }
  }
}

void Executor::Allreduce(ProcessSet& set, const Response& r) {
  const size_t elem = DataTypeSize(r.dtype);
  std::vector<TensorEntry*> entries;
  int64_t total = 0;
  for (size_t i = 0; i < r.names.size(); ++i) {
    entries.push_back(set.Find(r.names[i]));
    total += r.sizes[i];
  }
  const auto start = Clock::now();
  uint8_t* buffer;
  const bool in_place = entries.size() == 1 && entries[0] != nullptr;
  if (in_place) {
    // A single tensor is reduced in its output buffer: no fusion copies.
    TensorEntry* e = entries[0];
    buffer = static_cast<uint8_t*>(e->output.data);
    if (e->output.data != e->input.data && total > 0) {
      std::memcpy(buffer, e->input.data, total * elem);
    }
  } else {
    buffer = set.FusionBuffer(static_cast<size_t>(total) * elem);
    int64_t offset = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
      if (entries[i] != nullptr) {
        if (bytes > 0) std::memcpy(buffer + offset, entries[i]->input.data, bytes);
      } else {
        std::memset(buffer + offset, 0, bytes);  // joined: take part with zeros
      }
      offset += static_cast<int64_t>(bytes);
    }
    for (TensorEntry* e : entries) {
      if (e != nullptr) Phase(*e, "MEMCPY_IN_FUSION_BUFFER", start);
    }
  }
  ScaleBuffer(buffer, total, r.dtype, r.prescale);
  const auto reduce_start = Clock::now();
  Status status = set.backend().Allreduce(buffer, total, r.dtype, r.reduce_op);
  if (status.ok()) ScaleBuffer(buffer, total, r.dtype, PostFactor(r, set.size()));
  for (TensorEntry* e : entries) {
    if (e != nullptr) Phase(*e, "ALLREDUCE", reduce_start);
  }
  const auto copy_start = Clock::now();
  int64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
    if (entries[i] == nullptr) {
      offset += static_cast<int64_t>(bytes);
      continue;
    }
    if (!in_place && status.ok() && bytes > 0) {
      std::memcpy(entries[i]->output.data, buffer + offset, bytes);
      Phase(*entries[i], "MEMCPY_OUT_FUSION_BUFFER", copy_start);
    }
    offset += static_cast<int64_t>(bytes);
    Finish(set.Take(r.names[i]), status);
  }
}

void Executor::Allgather(ProcessSet& set, const Response& r) {
  TensorEntry* e = set.Find(r.names[0]);
  if (e == nullptr) return;
  const auto start = Clock::now();
  const std::vector<int64_t>& shape = e->request.shape;
  const int64_t row_bytes = RowBytes(shape, r.dtype);
  WorkResult result;
  result.dtype = r.dtype;
  result.shape = StackedShape(shape, r.sizes);
  result.data.resize(static_cast<size_t>(result.shape[0] * row_bytes));
  Status s = set.backend().Allgatherv(e->input.data, shape[0] * row_bytes, result.data.data(),
                                      RowsToBytes(r.sizes, row_bytes));
  Phase(*e, "ALLGATHER", start);
  Finish(set.Take(r.names[0]), s, &result);
}

void Executor::Broadcast(ProcessSet& set, const Response& r) {
  TensorEntry* e = set.Find(r.names[0]);
  if (e == nullptr) return;
  const auto start = Clock::now();
  Status s =
      set.backend().Broadcast(e->input.data, static_cast<int64_t>(e->input.NumBytes()), r.root);
  Phase(*e, "BROADCAST", start);
  Finish(set.Take(r.names[0]), s);
}

void Executor::Alltoall(ProcessSet& set, const Response& r) {
  TensorEntry* e = set.Find(r.names[0]);
  if (e == nullptr) return;
  const auto start = Clock::now();
  const int64_t row_bytes = RowBytes(e->request.shape, r.dtype);
  WorkResult result;
  Status s = set.backend().AlltoallCounts(e->splits, &result.received_splits);
  if (s.ok()) {
    result.dtype = r.dtype;
    result.shape = StackedShape(e->request.shape, result.received_splits);
    result.data.resize(static_cast<size_t>(result.shape[0] * row_bytes));
    s = set.backend().Alltoallv(e->input.data, RowsToBytes(e->splits, row_bytes),
                                result.data.data(), RowsToBytes(result.received_splits, row_bytes));
  }
  Phase(*e, "ALLTOALL", start);
  Finish(set.Take(r.names[0]), s, &result);
}

void Executor::Reducescatter(ProcessSet& set, const Response& r) {
  TensorEntry* e = set.Find(r.names[0]);
  if (e == nullptr) return;
  const auto start = Clock::now();
  const std::vector<int64_t>& shape = e->request.shape;
  const int n = set.size();
  const std::vector<int64_t> counts = BlockCounts(shape, n);
  const int64_t total = e->input.NumElements();
  const size_t elem = DataTypeSize(r.dtype);
  // Scale a copy: the caller's input stays untouched.
  uint8_t* send = set.FusionBuffer(static_cast<size_t>(total) * elem);
  if (total > 0) std::memcpy(send, e->input.data, static_cast<size_t>(total) * elem);
  ScaleBuffer(send, total, r.dtype, r.prescale);
  WorkResult result;
  result.dtype = r.dtype;
  result.shape = shape;
  result.shape[0] = SplitRows(shape[0], n, set.rank());
  result.data.resize(static_cast<size_t>(counts[set.rank()]) * elem);
  Status s = set.backend().ReduceScatter(send, result.data.data(), counts, r.dtype, r.reduce_op);
  if (s.ok()) {
    ScaleBuffer(result.data.data(), counts[set.rank()], r.dtype, PostFactor(r, n));
  }
  Phase(*e, "REDUCESCATTER", start);
  Finish(set.Take(r.names[0]), s, &result);
}

// Enqueues the collective on the GPU and parks its entries until it finishes.
void Executor::ExecuteGpu(ProcessSet& set, const Response& r) {
  InFlight f;
  f.start = Clock::now();
  std::vector<GpuTensor> tensors;
  for (size_t i = 0; i < r.names.size(); ++i) {
    GpuTensor t;
    if (TensorEntry* e = set.Find(r.names[i])) {
      t.input = e->input.data;
      t.output = e->output.data;
      t.count = e->input.NumElements();
      t.ready = e->ready;
      f.entries.push_back(set.Take(r.names[i]));
    } else if (r.op == OpType::kAllreduce) {
      t.count = r.sizes[i];  // joined: take part with zeros
    } else {
      return;  // not this rank's (cannot happen for ops other than allreduce)
    }
    tensors.push_back(std::move(t));
  }
  const MPI_Comm comm = set.comm();
  const int device = r.device;
  Result<Gpu::Token> token = Status::Internal("unreachable");
  switch (r.op) {
    case OpType::kAllreduce:
      f.phase = "NCCL_ALLREDUCE";
      token = gpu_->Allreduce(comm, device, tensors, r.dtype, r.reduce_op, r.prescale, r.postscale);
      break;
    case OpType::kBroadcast:
      f.phase = "NCCL_BROADCAST";
      token = gpu_->Broadcast(comm, device, tensors[0],
                              static_cast<int64_t>(f.entries[0].input.NumBytes()), r.root);
      break;
    case OpType::kAllgather: {
      f.phase = "NCCL_ALLGATHER";
      const std::vector<int64_t>& shape = f.entries[0].request.shape;
      const int64_t row_bytes = RowBytes(shape, r.dtype);
      f.result.shape = StackedShape(shape, r.sizes);
      token = gpu_->Allgatherv(comm, device, tensors[0], shape[0] * row_bytes,
                               RowsToBytes(r.sizes, row_bytes), &f.output);
      break;
    }
    case OpType::kAlltoall: {
      f.phase = "NCCL_ALLTOALL";
      TensorEntry& e = f.entries[0];
      const int64_t row_bytes = RowBytes(e.request.shape, r.dtype);
      // The split counts are host data: exchanged over MPI first.
      Status s = set.backend().AlltoallCounts(e.splits, &f.result.received_splits);
      if (!s.ok()) {
        token = s;
        break;
      }
      f.result.shape = StackedShape(e.request.shape, f.result.received_splits);
      token = gpu_->Alltoallv(comm, device, tensors[0], RowsToBytes(e.splits, row_bytes),
                              RowsToBytes(f.result.received_splits, row_bytes), &f.output);
      break;
    }
    case OpType::kReducescatter: {
      f.phase = "NCCL_REDUCESCATTER";
      const std::vector<int64_t>& shape = f.entries[0].request.shape;
      const int n = set.size();
      f.result.shape = shape;
      f.result.shape[0] = SplitRows(shape[0], n, set.rank());
      token = gpu_->ReduceScatter(comm, device, tensors[0], BlockCounts(shape, n), r.dtype,
                                  r.reduce_op, r.prescale, r.postscale, &f.output);
      break;
    }
    default:
      break;
  }
  if (!token.ok()) {
    for (TensorEntry& e : f.entries) Finish(std::move(e), token.status());
    return;
  }
  f.token = std::move(token).value();
  f.result.dtype = r.dtype;
  f.result.device = device;
  in_flight_.push_back(std::move(f));
}

void Executor::PollGpu() {
  for (size_t i = 0; i < in_flight_.size();) {
    InFlight& f = in_flight_[i];
    Result<bool> done = gpu_->Poll(f.token);
    if (done.ok() && !done.value()) {
      ++i;
      continue;
    }
    InFlight finished = std::move(f);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    finished.result.device_data = finished.output.data;
    for (TensorEntry& e : finished.entries) {
      Phase(e, finished.phase, finished.start);
      WorkResult result = finished.result;
      Finish(std::move(e), done.status(), &result);
    }
  }
}

void Executor::DrainGpu() {
  while (!in_flight_.empty()) {
    PollGpu();
    if (!in_flight_.empty()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace kolo
