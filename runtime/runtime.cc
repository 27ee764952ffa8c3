// The public API: validates every input on the calling thread
// (input_checks.h), so a bad argument fails at once on the rank that made it,
// with a message naming it; names, queues and hands out handles.
#include "kolo/runtime.h"

#include <algorithm>
#include <functional>

#include "input_checks.h"
#include "kolo/mpi_handle.h"
#include "logging.h"
#include "metrics_snapshot.h"
#include "ops/ulfm.h"
#include "replacements.h"
#include "runtime_impl.h"

namespace kolo {
namespace {

Request MakeRequest(OpType op, const std::string& name, const TensorView& t, int process_set,
                    int rank) {
  Request r;
  r.process_set = process_set;
  r.rank = rank;
  r.op = op;
  r.name = name;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.device = t.device;
  return r;
}

// A runtime on `comm`, which the caller made and gives up here: Create
// duplicates it, so this one is freed either way.
Result<std::unique_ptr<Runtime>> CreateOnOwned(MPI_Comm comm) {
  InitOptions options;
  options.comm = HandleOfComm(comm);
  Result<std::unique_ptr<Runtime>> made = Runtime::Create(options);
  MPI_Comm_free(&comm);
  return made;
}

}  // namespace

bool BuiltWithCuda() { return NcclBuilt(); }
int GpuCount() { return MakeGpu(GpuOptions())->DeviceCount(); }
int NcclVersion() { return NcclVersionCode(); }
std::string InPlaceRecoveryUnavailable() { return UlfmUnavailableReason(); }

const char* MpiAbi() { return KOLO_BUILT_MPI_ABI; }  // runtime/CMakeLists.txt

Status CopyDeviceResult(const WorkResult& result, void* dst) {
  if (result.device == kCpuDevice || !result.device_data) {
    return Status::InvalidArgument("the result is not in device memory");
  }
  int64_t bytes = static_cast<int64_t>(DataTypeSize(result.dtype));
  for (int64_t d : result.shape) bytes *= d;
  return CopyDeviceToDevice(dst, result.device_data.get(), bytes, result.device);
}

Runtime::Runtime(std::unique_ptr<RuntimeImpl> impl)
    : impl_(std::move(impl)),
      handles_(std::make_unique<HandleTable>()),
      placement_(impl_->placement()) {}

Runtime::~Runtime() {
  Status s = Shutdown();
  if (!s.ok()) KOLO_LOG(kError) << "kolo shutdown failed: " << s.message();
}

Result<std::unique_ptr<Runtime>> Runtime::Create(const InitOptions& options) {
  Result<std::unique_ptr<RuntimeImpl>> impl = RuntimeImpl::Create(options);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl).value()));
}

Status Runtime::Shutdown() {
  // New processes that initialized MPI and wait to join would fail once this
  // rank (rank 0, the one they are connected to) has gone: they are told to end.
  if (spawn_ && spawn_->Done()) {
    Status released = ReleaseReplacements(std::chrono::milliseconds(0));
    if (!released.ok()) KOLO_LOG(kWarning) << "the new processes: " << released.message();
  }
  return impl_ ? impl_->Shutdown() : Status::OK();
}

Result<std::unique_ptr<Runtime>> Runtime::ResumeOnSurvivors() {
  if (!impl_) return Status::PreconditionFailed("kolo is not running");
  Result<MPI_Comm> shrunk = impl_->ShrinkAfterFailure();
  if (!shrunk.ok()) return shrunk.status();
  return CreateOnOwned(shrunk.value());
}

Status Runtime::StartReplacements(const std::string& command, const std::vector<std::string>& args,
                                  const std::vector<std::string>& hosts,
                                  const std::vector<std::string>& environment,
                                  const std::vector<std::string>& added) {
  if (!impl_) return Status::PreconditionFailed("kolo is not running");
  const std::string why_not = UlfmUnavailableReason();
  if (!why_not.empty()) return Status::PreconditionFailed("cannot grow in place: " + why_not);
  if (!placement_.threads_multiple) {
    return Status::PreconditionFailed(
        "cannot grow in place: MPI runs below MPI_THREAD_MULTIPLE here, and the new processes "
        "are started from a thread of their own");
  }
  if (spawn_) return Status::PreconditionFailed("new processes are being started already");
  if (hosts.empty()) return Status::InvalidArgument("no hosts to start new processes on");
  spawn_ = std::make_unique<ReplacementSpawn>(
      ReplacementRequest{command, args, hosts, environment, added});
  return Status::OK();
}

Runtime::Replacements Runtime::replacements(std::string* why) {
  if (!not_joined_.empty()) {
    if (why != nullptr) *why = not_joined_;
    not_joined_.clear();
    return Replacements::kFailed;
  }
  if (!spawn_) return Replacements::kNone;
  if (!spawn_->Done()) return Replacements::kStarting;
  const Status started = spawn_->status();
  if (started.ok()) return Replacements::kReady;
  if (why != nullptr) *why = started.message();
  spawn_.reset();
  return Replacements::kFailed;
}

void Runtime::AbandonReplacements() { spawn_.reset(); }

Status Runtime::ReleaseReplacements(std::chrono::milliseconds patience) {
  if (!spawn_) return Status::OK();
  if (!spawn_->WaitUntilDone(patience)) {
    spawn_.reset();
    return Status::Aborted("they did not initialize MPI within " +
                           std::to_string(patience.count() / 1000) +
                           " s: dead, or stuck before hvd.init()");
  }
  Result<MPI_Comm> pair = spawn_->Take();
  spawn_.reset();
  if (!pair.ok()) return pair.status();
  return DismissReplacements(pair.value());
}

Result<std::unique_ptr<Runtime>> Runtime::GrowInPlace() {
  if (!impl_) return Status::PreconditionFailed("kolo is not running");
  MPI_Comm pair = MPI_COMM_NULL;
  if (spawn_) {
    Result<MPI_Comm> taken = spawn_->Take();
    spawn_.reset();
    if (!taken.ok()) return taken.status();
    pair = taken.value();
  }
  Result<MPI_Comm> ranks = impl_->HandOverForGrowth();
  if (!ranks.ok()) {
    if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
    return ranks.status();
  }
  MPI_Comm own = ranks.value();
  Result<MPI_Comm> merged = MergeReplacements(own, pair);
  if (merged.ok()) {
    MPI_Comm_free(&own);
    return CreateOnOwned(merged.value());
  }
  if (merged.status().code() != StatusCode::kAborted) {
    MPI_Comm_free(&own);
    return merged.status();
  }
  // The new processes did not come: the job goes on without them.
  Result<std::unique_ptr<Runtime>> same = CreateOnOwned(own);
  if (same.ok() && placement_.rank == 0) same.value()->not_joined_ = merged.status().message();
  return same;
}

bool Runtime::is_running() const { return impl_->running(); }

std::string Runtime::stop_reason() { return impl_->stop_reason(); }

TunedSettings Runtime::CurrentTunedSettings() const { return impl_->tuned_settings(); }
CycleStats Runtime::cycle_stats() const { return impl_->cycle_stats(); }

Result<std::vector<int>> Runtime::ProcessSetRanks(int process_set) const {
  auto info = impl_->SetInfo(process_set);
  if (!info.ok()) return info.status();
  return info.value()->ranks;
}

Result<int> Runtime::ProcessSetRank(int process_set) const {
  auto info = impl_->SetInfo(process_set);
  if (!info.ok()) return info.status();
  return info.value()->rank_in_set;
}

namespace {

// The set's info for an operation by this rank, or why it cannot run there.
Result<std::shared_ptr<const ProcessSetInfo>> MemberSet(RuntimeImpl& impl, int id) {
  auto info = impl.SetInfo(id);
  if (!info.ok()) return info.status();
  if (info.value()->rank_in_set < 0) {
    return Status::InvalidArgument("this rank (" + std::to_string(impl.placement().rank) +
                                   ") is not a member of process set " + std::to_string(id));
  }
  return info;
}

// The entries of one operation on `inputs`, named (but for unnamed ones,
// which RuntimeImpl numbers). Several tensors form a group, negotiated as one
// unit: members "<name>.<i>".
std::vector<TensorEntry> MakeEntries(OpType op, const CollectiveOptions& options, int rank_in_set,
                                     const std::vector<TensorView>& inputs) {
  const bool grouped = inputs.size() > 1;
  const bool unnamed = options.name.empty();  // RuntimeImpl::Enqueue numbers it
  std::vector<TensorEntry> entries(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorEntry& e = entries[i];
    e.request = MakeRequest(op,
                            unnamed   ? std::string()
                            : grouped ? options.name + "." + std::to_string(i)
                                      : options.name,
                            inputs[i], options.process_set, rank_in_set);
    if (unnamed) e.request.call_site = options.call_site;
    if (grouped) {
      e.request.group = options.name;
      e.request.group_size = static_cast<int32_t>(inputs.size());
    }
    e.part = static_cast<int>(i);
  }
  return entries;
}

// Builds and queues the entries of one operation on `inputs` (already
// validated) with one Work. `fill` sets entry i's op-specific fields.
Result<Handle> EnqueueTensors(RuntimeImpl& impl, HandleTable& handles, OpType op,
                              const CollectiveOptions& options, int rank_in_set,
                              const std::vector<TensorView>& inputs,
                              const std::vector<TensorView>& outputs,
                              const std::function<void(TensorEntry&, size_t)>& fill = nullptr) {
  std::vector<TensorEntry> entries = MakeEntries(op, options, rank_in_set, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorEntry& e = entries[i];
    e.input = inputs[i];
    // Nothing reads an output's shape (it is the input's): one allocation less per tensor.
    e.output.data = outputs[i].data;
    e.output.dtype = outputs[i].dtype;
    e.output.device = outputs[i].device;
    e.stream = options.cuda_stream;
    if (fill) fill(e, i);
  }
  KOLO_ASSIGN_OR_RETURN(std::shared_ptr<Work> work,
                        impl.Enqueue(std::move(entries), options.caller_waits));
  return handles.Add(std::move(work));
}

// `why` (a bad input) refuses a collective of `count` tensors on this rank:
// the other ranks of the set are told, so that their matching collective
// fails too instead of waiting for this rank; returns `why` for the caller.
Status Refuse(RuntimeImpl& impl, OpType op, const CollectiveOptions& options, int rank_in_set,
              size_t count, Status why) {
  impl.Refuse(
      MakeEntries(op, options, rank_in_set, std::vector<TensorView>(std::max<size_t>(count, 1))),
      why.message());
  return why;
}

// The single entry of a one-tensor operation.
Result<Handle> EnqueueOne(RuntimeImpl& impl, HandleTable& handles, OpType op,
                          const CollectiveOptions& options, int rank_in_set,
                          const TensorView& tensor,
                          const std::function<void(TensorEntry&)>& fill = nullptr) {
  return EnqueueTensors(impl, handles, op, options, rank_in_set, {tensor}, {tensor},
                        [&](TensorEntry& e, size_t) {
                          if (fill) fill(e);
                        });
}

}  // namespace

Result<Handle> Runtime::EnqueueAllreduce(const TensorView& input, const TensorView& output,
                                         const AllreduceOptions& options) {
  return EnqueueGroupedAllreduce({input}, {output}, options);
}

Result<Handle> Runtime::EnqueueGroupedAllreduce(const std::vector<TensorView>& inputs,
                                                const std::vector<TensorView>& outputs,
                                                const AllreduceOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  Status valid = CheckAllreduce(inputs, outputs, options);
  if (valid.ok() && options.op == ReduceOp::kAdasum) {
    valid = CheckAdasum(inputs, options.process_set, placement_);
  }
  if (!valid.ok()) {
    return Refuse(*impl_, OpType::kAllreduce, options, set.value()->rank_in_set, inputs.size(),
                  valid);
  }
  return EnqueueTensors(*impl_, *handles_, OpType::kAllreduce, options, set.value()->rank_in_set,
                        inputs, outputs, [&](TensorEntry& e, size_t) {
                          e.request.reduce_op = options.op;
                          e.request.prescale = options.prescale_factor;
                          e.request.postscale = options.postscale_factor;
                        });
}

Result<Handle> Runtime::EnqueueAllgather(const TensorView& input,
                                         const CollectiveOptions& options) {
  return EnqueueGroupedAllgather({input}, options);
}

Result<Handle> Runtime::EnqueueGroupedAllgather(const std::vector<TensorView>& inputs,
                                                const CollectiveOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  Status valid = CheckAllgather(inputs);
  if (!valid.ok()) {
    return Refuse(*impl_, OpType::kAllgather, options, set.value()->rank_in_set, inputs.size(),
                  valid);
  }
  return EnqueueTensors(*impl_, *handles_, OpType::kAllgather, options, set.value()->rank_in_set,
                        inputs, inputs);
}

Result<Handle> Runtime::EnqueueBroadcast(const TensorView& tensor, int root_rank,
                                         const CollectiveOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  Status valid = CheckBroadcast(tensor, root_rank, static_cast<int>(set.value()->ranks.size()));
  if (!valid.ok()) {
    return Refuse(*impl_, OpType::kBroadcast, options, set.value()->rank_in_set, 1, valid);
  }
  return EnqueueOne(*impl_, *handles_, OpType::kBroadcast, options, set.value()->rank_in_set,
                    tensor, [&](TensorEntry& e) { e.request.root = root_rank; });
}

Result<Handle> Runtime::EnqueueAlltoall(const TensorView& input, const std::vector<int64_t>& splits,
                                        const CollectiveOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  Status valid = CheckTensor(input, "alltoall input");
  if (valid.ok()) valid = CheckHasDimension(input, "alltoall", "");
  std::vector<int64_t> rows;
  if (valid.ok()) {
    auto s = AlltoallSplits(input, splits, static_cast<int>(set.value()->ranks.size()));
    if (s.ok()) rows = std::move(s).value();
    valid = s.status();
  }
  if (!valid.ok()) {
    return Refuse(*impl_, OpType::kAlltoall, options, set.value()->rank_in_set, 1, valid);
  }
  return EnqueueOne(*impl_, *handles_, OpType::kAlltoall, options, set.value()->rank_in_set, input,
                    [&](TensorEntry& e) { e.splits = std::move(rows); });
}

Result<Handle> Runtime::EnqueueReducescatter(const TensorView& input,
                                             const ReducescatterOptions& options) {
  return EnqueueGroupedReducescatter({input}, options);
}

Result<Handle> Runtime::EnqueueGroupedReducescatter(const std::vector<TensorView>& inputs,
                                                    const ReducescatterOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  Status valid = CheckReducescatter(inputs, options);
  if (!valid.ok()) {
    return Refuse(*impl_, OpType::kReducescatter, options, set.value()->rank_in_set, inputs.size(),
                  valid);
  }
  return EnqueueTensors(*impl_, *handles_, OpType::kReducescatter, options,
                        set.value()->rank_in_set, inputs, inputs, [&](TensorEntry& e, size_t) {
                          e.request.reduce_op = options.op;
                          e.request.prescale = options.prescale_factor;
                          e.request.postscale = options.postscale_factor;
                        });
}

Result<Handle> Runtime::EnqueueBarrier(const CollectiveOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  // One name for every barrier (one per set at a time), so that barriers pair
  // up even when the ranks' unnamed collectives are out of step; once it
  // completes, every rank numbers its unnamed collectives afresh.
  CollectiveOptions named = options;
  if (named.name.empty()) named.name = "barrier";
  return EnqueueOne(*impl_, *handles_, OpType::kBarrier, named, set.value()->rank_in_set,
                    TensorView{});
}

Result<Handle> Runtime::EnqueueJoin(const CollectiveOptions& options) {
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return set.status();
  CollectiveOptions named = options;
  named.name = "join";  // one join per set at a time
  return EnqueueOne(*impl_, *handles_, OpType::kJoin, named, set.value()->rank_in_set,
                    TensorView{});
}

Result<Handle> Runtime::EnqueueAddProcessSet(const std::vector<int>& ranks) {
  KOLO_RETURN_IF_ERROR(CheckSetRanks(ranks, size()));
  CollectiveOptions named;
  named.name = "add_process_set";  // collective over all ranks, one at a time
  return EnqueueOne(*impl_, *handles_, OpType::kAddProcessSet, named, rank(), TensorView{},
                    [&](TensorEntry& e) { e.request.ranks.assign(ranks.begin(), ranks.end()); });
}

Result<Handle> Runtime::EnqueueRemoveProcessSet(int process_set) {
  if (process_set == kGlobalProcessSet) {
    return Status::InvalidArgument("the global process set (0) cannot be removed");
  }
  auto info = impl_->SetInfo(process_set);
  if (!info.ok()) return info.status();
  CollectiveOptions named;
  named.name = "remove_process_set";  // collective over all ranks, one at a time
  return EnqueueOne(*impl_, *handles_, OpType::kRemoveProcessSet, named, rank(), TensorView{},
                    [&](TensorEntry& e) { e.request.ranks = {process_set}; });
}

void Runtime::AnnounceRefusal(const std::string& op, int count, const CollectiveOptions& options,
                              const std::string& reason) {
  static const OpType kOps[] = {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast,
                                OpType::kAlltoall, OpType::kReducescatter};
  const OpType* found =
      std::find_if(std::begin(kOps), std::end(kOps), [&](OpType o) { return op == OpTypeName(o); });
  if (found == std::end(kOps)) return;
  // A set this rank is not in (or that does not exist) has no member waiting for it.
  auto set = MemberSet(*impl_, options.process_set);
  if (!set.ok()) return;
  (void)Refuse(*impl_, *found, options, set.value()->rank_in_set, static_cast<size_t>(count),
               Status::InvalidArgument(reason));
}

bool Runtime::Poll(Handle handle) const {
  Result<std::shared_ptr<Work>> work = handles_->Find(handle);
  return !work.ok() || work.value()->done();
}

Status Runtime::Wait(Handle handle, WorkResult* result) {
  KOLO_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, handles_->Find(handle));
  if (!work->done()) impl_->RunCyclesFor(*work);
  Status s = work->Wait(result);
  handles_->Release(handle);
  impl_->Release(*work);
  return s;
}

void Runtime::Release(Handle handle) {
  Result<std::shared_ptr<Work>> work = handles_->Find(handle);
  if (!work.ok()) return;
  handles_->Release(handle);
  impl_->Release(*work.value());
}

std::optional<Status> Runtime::WaitFor(Handle handle, double timeout_seconds, WorkResult* result) {
  Result<std::shared_ptr<Work>> work = handles_->Find(handle);
  if (!work.ok()) return work.status();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_seconds));
  // A zero timeout is a poll: it never runs a cycle (the Python binding polls
  // with the GIL held).
  if (timeout_seconds > 0 && !work.value()->done()) impl_->RunCyclesFor(*work.value(), deadline);
  Status s;
  if (!work.value()->WaitUntil(deadline, &s, result)) return std::nullopt;
  handles_->Release(handle);
  impl_->Release(*work.value());
  return s;
}

void Runtime::WhenDone(Handle handle, std::function<void(Status, WorkResult)> done) {
  Result<std::shared_ptr<Work>> found = handles_->Find(handle);
  if (!found.ok()) {
    done(found.status(), WorkResult{});
    return;
  }
  const std::shared_ptr<Work> work = std::move(found).value();
  // The callback holds the work (and the work its callback) until it runs.
  work->WhenDone([this, handle, work, done = std::move(done)]() {
    WorkResult result;
    Status s = work->Wait(&result);  // done already: takes the result
    handles_->Release(handle);
    impl_->Release(*work);
    done(std::move(s), std::move(result));
  });
  // The callback is how its caller waits: the round starts at once, as for a
  // caller that waits, not after a cycle time for others to fuse with.
  if (!work->done()) impl_->DueNow();
}

void Runtime::CountStep() { impl_->metrics().CountStep(); }

std::vector<std::pair<std::string, int64_t>> Runtime::Counters() const {
  const MetricsSample m = impl_->metrics().Sample();
  std::vector<std::pair<std::string, int64_t>> out = {{"steps", m.steps},
                                                      {"negotiate_us", m.negotiate_us},
                                                      {"move_us", m.move_us},
                                                      {"wait_us", m.wait_us}};
  for (int o = 0; o < kCountedOps; ++o) {
    for (int k = 0; k < kSetSlots; ++k) {
      if (m.ops[o][k].count == 0) continue;
      const std::string key = std::string(CountedOpName(o)) + "." + std::to_string(k);
      out.emplace_back(key + ".count", m.ops[o][k].count);
      out.emplace_back(key + ".bytes", m.ops[o][k].bytes);
    }
  }
  return out;
}

Status Runtime::StartTimeline(const std::string& path, bool mark_cycles) {
  if (rank() != 0) return Status::OK();
  return impl_->timeline().Start(path, mark_cycles);
}

Status Runtime::StopTimeline() {
  impl_->timeline().Stop();
  return Status::OK();
}

}  // namespace kolo
