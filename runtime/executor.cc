#include "executor.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/rows.h"
#include "logging.h"
#include "ops/cpu_kernels.h"

namespace kolo {
namespace {

// The reduction's last step on host memory: the user's postscale, then, for
// an average, the division by the number of ranks.
void Finalize(void* data, int64_t count, const Response& r, int size) {
  ScaleBuffer(data, count, r.dtype, r.postscale);
  if (r.reduce_op == ReduceOp::kAverage) DivideBuffer(data, count, r.dtype, size);
}

}  // namespace

Clock::time_point Executor::PhaseStart() const {
  return timeline_ != nullptr && timeline_->active() ? Clock::now() : Clock::time_point{};
}

void Executor::Phase(const TensorEntry& e, const char* phase, Clock::time_point begin) {
  // Not begun while the timeline was off (it started since): no span.
  if (begin == Clock::time_point{}) return;
  if (timeline_ != nullptr && timeline_->active()) {
    timeline_->Span(TimelineRow(e.request), phase, begin, Clock::now());
  }
}

void Executor::Finish(TensorEntry&& entry, const Status& status, WorkResult* result) {
  Finished& f = finished_.emplace_back();
  f.entry = std::move(entry);
  f.status = status;
  if (result != nullptr) f.result = std::move(*result);
}

uint8_t* Executor::FusionBuffer(size_t bytes) {
  if (fusion_buffer_.size() < bytes) fusion_buffer_.resize(bytes);
  return fusion_buffer_.data();
}

void Executor::Execute(Job job, const Movers& movers) {
  try {
    Run(job, movers);
  } catch (const std::exception& e) {
    // The entries not finished yet (not moved out) fail with the reason; the
    // loop completes them and stops kolo.
    const Status status =
        Status::Internal(std::string("kolo's background thread stopped on an "
                                     "exception (") +
                         e.what() + ") while running this " + OpTypeName(job.response.op));
    for (std::optional<TensorEntry>& entry : job.entries) {
      if (entry && entry->work) Finish(std::move(*entry), status);
    }
    throw;
  }
}

void Executor::Run(Job& job, const Movers& movers) {
  const Response& r = job.response;
  if (r.device != kCpuDevice) return ExecuteOnDevice(job, movers);
  if (r.op == OpType::kAllreduce) return Allreduce(job, movers);
  // The other collectives run one tensor at a time, and only allreduce lets a
  // joined rank take part without one.
  if (job.entries.empty() || !job.entries[0]) return;
  TensorEntry& e = *job.entries[0];
  switch (r.op) {
    case OpType::kAllgather:
      return Allgather(e, r, *movers.host);
    case OpType::kBroadcast:
      return Broadcast(e, r, *movers.host);
    case OpType::kAlltoall:
      return Alltoall(e, r, *movers.host);
    case OpType::kReducescatter:
      return Reducescatter(e, r, movers);
    default:
      return Finish(std::move(e), Status::Internal(std::string("kolo's executor was handed a ") +
                                                   OpTypeName(r.op) + " response"));
  }
}

void Executor::Allreduce(Job& job, const Movers& movers) {
  const Response& r = job.response;
  std::vector<std::optional<TensorEntry>>& entries = job.entries;
  const size_t elem = DataTypeSize(r.dtype);
  int64_t total = 0;
  for (int64_t size : r.sizes) total += size;
  const auto start = PhaseStart();
  uint8_t* buffer;
  // One entry of this rank, not fused with others: it is reduced in its own
  // output buffer, with no fusion copies. Out of place and unscaled, the mover
  // reads the input itself (no copy to output).
  const bool single_entry = entries.size() == 1 && entries[0].has_value();
  // Adasum combines tensor by tensor (r.sizes), not element by element.
  const bool adasum = r.reduce_op == ReduceOp::kAdasum;
  const void* separate_input = nullptr;
  const bool every_entry =
      std::all_of(entries.begin(), entries.end(),
                  [](const std::optional<TensorEntry>& e) { return e.has_value(); });
  if (movers.size == 1 && every_entry) return AllreduceAlone(job, movers);
  if (!single_entry && every_entry && !adasum && r.prescale == 1.0 &&
      movers.host->TakesParts(total * static_cast<int64_t>(elem))) {
    return AllreduceParts(job, movers);
  }
  if (single_entry) {
    TensorEntry& e = *entries[0];
    buffer = static_cast<uint8_t*>(e.output.data);
    if (e.output.data != e.input.data && total > 0) {
      if (r.prescale == 1.0 && !adasum) {
        separate_input = e.input.data;
      } else {
        std::memcpy(buffer, e.input.data, total * elem);
      }
    }
  } else {
    buffer = FusionBuffer(static_cast<size_t>(total) * elem);
    int64_t offset = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
      if (!entries[i]) {
        std::memset(buffer + offset, 0, bytes);  // joined: take part with zeros
      } else if (bytes > 0) {
        std::memcpy(buffer + offset, entries[i]->input.data, bytes);
      }
      offset += static_cast<int64_t>(bytes);
    }
    for (auto& e : entries) {
      if (e) Phase(*e, "MEMCPY_IN_FUSION_BUFFER", start);
    }
  }
  ScaleBuffer(buffer, total, r.dtype, r.prescale);
  const auto reduce_start = PhaseStart();
  Status status =
      adasum ? movers.host->Adasum(buffer, r.sizes, r.dtype)
      : separate_input != nullptr
          ? movers.host->AllreduceInto(separate_input, buffer, total, r.dtype, r.reduce_op)
          : movers.host->Allreduce(buffer, total, r.dtype, r.reduce_op);
  if (status.ok()) Finalize(buffer, total, r, movers.size);
  for (auto& e : entries) {
    if (e)
      Phase(*e, adasum ? "MPI_ADASUM_ALLREDUCE" : movers.host->AllreduceActivity(), reduce_start);
  }
  const auto copy_start = PhaseStart();
  int64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t bytes = static_cast<size_t>(r.sizes[i]) * elem;
    if (entries[i]) {
      if (!single_entry && status.ok() && bytes > 0) {
        std::memcpy(entries[i]->output.data, buffer + offset, bytes);
        Phase(*entries[i], "MEMCPY_OUT_FUSION_BUFFER", copy_start);
      }
      Finish(std::move(*entries[i]), status);
    }
    offset += static_cast<int64_t>(bytes);
  }
}

// Nothing is fused or moved: a tensor in place is already its result (Average divides by
// one, Adasum of one vector is the vector); one out of place is copied.
void Executor::AllreduceAlone(Job& job, const Movers& movers) {
  const Response& r = job.response;
  const auto start = PhaseStart();
  const size_t elem = DataTypeSize(r.dtype);
  for (size_t i = 0; i < job.entries.size(); ++i) {
    TensorEntry& e = *job.entries[i];
    const int64_t count = r.sizes[i];
    if (e.output.data != e.input.data && count > 0) {
      std::memcpy(e.output.data, e.input.data, static_cast<size_t>(count) * elem);
    }
    ScaleBuffer(e.output.data, count, r.dtype, r.prescale);
    Finalize(e.output.data, count, r, 1);
    Phase(e, movers.host->AllreduceActivity(), start);
    Finish(std::move(e), Status::OK());
  }
}

void Executor::AllreduceParts(Job& job, const Movers& movers) {
  const Response& r = job.response;
  const auto start = Clock::now();
  std::vector<HostMover::Part> parts;
  parts.reserve(job.entries.size());
  for (size_t i = 0; i < job.entries.size(); ++i) {
    const TensorEntry& e = *job.entries[i];
    parts.push_back({e.input.data, e.output.data, r.sizes[i]});
  }
  const Status status = movers.host->AllreduceParts(parts, r.dtype, r.reduce_op);
  for (size_t i = 0; i < job.entries.size(); ++i) {
    TensorEntry& e = *job.entries[i];
    if (status.ok()) Finalize(e.output.data, r.sizes[i], r, movers.size);
    Phase(e, movers.host->AllreduceActivity(), start);
    Finish(std::move(e), status);
  }
}

void Executor::Allgather(TensorEntry& e, const Response& r, HostMover& mover) {
  const auto start = Clock::now();
  const std::vector<int64_t>& shape = e.request.shape;
  const int64_t row_bytes = RowBytes(shape, r.dtype);
  WorkResult result;
  result.dtype = r.dtype;
  result.shape = StackedShape(shape, r.sizes);
  result.data.resize(static_cast<size_t>(result.shape[0] * row_bytes));
  Status s = mover.Allgatherv(e.input.data, shape[0] * row_bytes, result.data.data(),
                              RowsToBytes(r.sizes, row_bytes));
  Phase(e, "MPI_ALLGATHER", start);
  Finish(std::move(e), s, &result);
}

void Executor::Broadcast(TensorEntry& e, const Response& r, HostMover& mover) {
  const auto start = Clock::now();
  Status s = mover.Broadcast(e.input.data, static_cast<int64_t>(e.input.NumBytes()), r.root);
  Phase(e, "MPI_BCAST", start);
  Finish(std::move(e), s);
}

void Executor::Alltoall(TensorEntry& e, const Response& r, HostMover& mover) {
  const auto start = Clock::now();
  const int64_t row_bytes = RowBytes(e.request.shape, r.dtype);
  WorkResult result;
  Status s = mover.AlltoallCounts(e.splits, &result.received_splits);
  if (s.ok()) {
    result.dtype = r.dtype;
    result.shape = StackedShape(e.request.shape, result.received_splits);
    result.data.resize(static_cast<size_t>(result.shape[0] * row_bytes));
    s = mover.Alltoallv(e.input.data, RowsToBytes(e.splits, row_bytes), result.data.data(),
                        RowsToBytes(result.received_splits, row_bytes));
  }
  Phase(e, "MPI_ALLTOALL", start);
  Finish(std::move(e), s, &result);
}

void Executor::Reducescatter(TensorEntry& e, const Response& r, const Movers& movers) {
  const auto start = Clock::now();
  const std::vector<int64_t>& shape = e.request.shape;
  const int n = movers.size, me = movers.rank;
  const std::vector<int64_t> counts = BlockCounts(shape, n);
  const int64_t total = e.input.NumElements();
  const size_t elem = DataTypeSize(r.dtype);
  // Scale a copy: the caller's input stays untouched.
  uint8_t* send = FusionBuffer(static_cast<size_t>(total) * elem);
  if (total > 0) std::memcpy(send, e.input.data, static_cast<size_t>(total) * elem);
  ScaleBuffer(send, total, r.dtype, r.prescale);
  WorkResult result;
  result.dtype = r.dtype;
  result.shape = shape;
  result.shape[0] = SplitRows(shape[0], n, me);
  result.data.resize(static_cast<size_t>(counts[me]) * elem);
  Status s = movers.host->ReduceScatter(send, result.data.data(), counts, r.dtype, r.reduce_op);
  if (s.ok()) Finalize(result.data.data(), counts[me], r, n);
  Phase(e, "MPI_REDUCESCATTER", start);
  Finish(std::move(e), s, &result);
}

// Enqueues the collective on the GPU and parks its entries until it finishes.
void Executor::ExecuteOnDevice(Job& job, const Movers& movers) {
  const Response& r = job.response;
  InFlight f;
  f.gpu = movers.device;
  f.start = Clock::now();
  std::vector<GpuTensor> tensors;
  for (size_t i = 0; i < job.entries.size(); ++i) {
    GpuTensor t;
    if (const std::optional<TensorEntry>& e = job.entries[i]) {
      t.input = e->input.data;
      t.output = e->output.data;
      t.count = e->input.NumElements();
      t.ready = e->ready;
      t.stream = e->stream;
    } else if (r.op == OpType::kAllreduce) {
      t.count = r.sizes[i];  // joined: take part with zeros
    } else {
      return;  // not this rank's (only allreduce lets a joined rank take part)
    }
    tensors.push_back(std::move(t));
  }
  // Every op but allreduce has this rank's entry (checked above).
  const TensorEntry* first = job.entries[0] ? &*job.entries[0] : nullptr;
  Result<Gpu::Token> token = StartOnDevice(r, first, tensors, movers, f);
  for (std::optional<TensorEntry>& e : job.entries) {
    if (!e) continue;
    if (token.ok()) {
      f.entries.push_back(std::move(*e));
    } else {
      Finish(std::move(*e), token.status());
    }
  }
  if (!token.ok()) return;
  f.token = std::move(token).value();
  f.result.dtype = r.dtype;
  f.result.device = r.device;
  // Async completion: a result in the caller's own tensor is there for the
  // work queued on its stream from now on; the host need not wait for it.
  if (async_completion_ && (r.op == OpType::kAllreduce || r.op == OpType::kBroadcast)) {
    for (TensorEntry& e : f.entries) {
      Phase(e, f.phase, f.start);
      const Status ordered = f.gpu->OrderAfter(f.token, e.stream);
      Finish(std::move(e), ordered);
    }
    f.entries.clear();
  }
  in_flight_.push_back(std::move(f));
}

Result<Gpu::Token> Executor::StartOnDevice(const Response& r, const TensorEntry* first,
                                           const std::vector<GpuTensor>& tensors,
                                           const Movers& movers, InFlight& f) {
  Gpu& gpu = *movers.device;
  GpuComms& comms = *movers.device_comms;
  const int device = r.device;
  switch (r.op) {
    case OpType::kAllreduce:
      f.phase = "NCCL_ALLREDUCE";
      return gpu.Allreduce(comms, device, tensors, r.dtype, r.reduce_op, r.prescale, r.postscale);
    case OpType::kBroadcast:
      f.phase = "NCCL_BCAST";
      return gpu.Broadcast(comms, device, tensors[0], static_cast<int64_t>(first->input.NumBytes()),
                           r.root);
    case OpType::kAllgather: {
      f.phase = "NCCL_ALLGATHER";
      const std::vector<int64_t>& shape = first->request.shape;
      const int64_t row_bytes = RowBytes(shape, r.dtype);
      f.result.shape = StackedShape(shape, r.sizes);
      return gpu.Allgatherv(comms, device, tensors[0], shape[0] * row_bytes,
                            RowsToBytes(r.sizes, row_bytes), &f.output);
    }
    case OpType::kAlltoall: {
      f.phase = "NCCL_ALLTOALL";
      const TensorEntry& e = *first;
      const int64_t row_bytes = RowBytes(e.request.shape, r.dtype);
      // The split counts are host data: exchanged through the host mover first.
      KOLO_RETURN_IF_ERROR(movers.host->AlltoallCounts(e.splits, &f.result.received_splits));
      f.result.shape = StackedShape(e.request.shape, f.result.received_splits);
      return gpu.Alltoallv(comms, device, tensors[0], RowsToBytes(e.splits, row_bytes),
                           RowsToBytes(f.result.received_splits, row_bytes), &f.output);
    }
    case OpType::kReducescatter: {
      f.phase = "NCCL_REDUCESCATTER";
      const std::vector<int64_t>& shape = first->request.shape;
      f.result.shape = shape;
      f.result.shape[0] = SplitRows(shape[0], movers.size, movers.rank);
      return gpu.ReduceScatter(comms, device, tensors[0], BlockCounts(shape, movers.size), r.dtype,
                               r.reduce_op, r.prescale, r.postscale, &f.output);
    }
    default:
      return Status::Internal(std::string("kolo's executor was handed a ") + OpTypeName(r.op) +
                              " response for a device tensor");
  }
}

void Executor::PollGpu() {
  for (size_t i = 0; i < in_flight_.size();) {
    InFlight& f = in_flight_[i];
    Result<bool> done = f.gpu->Poll(f.token);
    if (done.ok() && !done.value()) {
      ++i;
      continue;
    }
    InFlight finished = std::move(f);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    if (!done.ok() && finished.entries.empty()) {
      // Completed already (async completion): nobody waits to be told.
      KOLO_LOG(kError) << finished.phase << " failed on the GPU after it completed (async "
                       << "completion): " << done.status().message()
                       << "; the process set's later GPU collectives fail";
    }
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
