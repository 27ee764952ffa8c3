// The TensorFlow op library's way into the runtime: one operation of the C
// table (tensorflow/kolo_tf_abi.h) enqueued on TensorFlow's own buffers, host
// or device memory, and reported back through Runtime::WhenDone, so that
// TensorFlow's async kernels block no thread while a collective runs; a caller
// that blocks anyway (eager execution) waits, and so runs the round itself.
#include "tf_operation.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "kolo/runtime.h"

namespace kolo {
namespace {

static_assert(KOLO_TF_UINT8 == static_cast<int>(DataType::kUInt8));
static_assert(KOLO_TF_INT64 == static_cast<int>(DataType::kInt64));
static_assert(KOLO_TF_BFLOAT16 == static_cast<int>(DataType::kBFloat16));
static_assert(KOLO_TF_FLOAT32 == static_cast<int>(DataType::kFloat32));
static_assert(KOLO_TF_BOOL == static_cast<int>(DataType::kBool) &&
              KOLO_TF_BOOL + 1 == kNumDataTypes);
static_assert(KOLO_TF_HOST == kCpuDevice);
static_assert(KOLO_TF_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument));

// What a KoloTfOutcome points into, alive until the op library releases it.
struct Outcome {
  Status status;
  WorkResult result;
  std::vector<KoloTfResult> results;
  KoloTfOutcome c{};
};

void ReleaseOutcome(void* keep) { delete static_cast<Outcome*>(keep); }

bool Gathers(int32_t kind) {
  return kind == KOLO_TF_ALLGATHER || kind == KOLO_TF_ALLTOALL || kind == KOLO_TF_REDUCESCATTER;
}

void Deliver(int32_t kind, Status status, WorkResult result, KoloTfDone done, void* context) {
  auto* o = new Outcome{std::move(status), std::move(result), {}, {}};
  if (o->status.ok() && Gathers(kind)) {
    std::vector<WorkResult*> parts;
    if (o->result.parts.empty()) parts.push_back(&o->result);
    for (WorkResult& part : o->result.parts) parts.push_back(&part);
    for (WorkResult* part : parts) {
      // A device result stays in the device memory that the collective wrote.
      const bool host = part->device == kCpuDevice;
      size_t bytes = part->data.size();
      if (!host) {
        bytes = DataTypeSize(part->dtype);
        for (int64_t d : part->shape) bytes *= static_cast<size_t>(d);
      }
      o->results.push_back(KoloTfResult{
          host ? part->data.data() : part->device_data.get(), part->device, bytes,
          static_cast<int32_t>(part->shape.size()), part->shape.data(),
          part->received_splits.data(), static_cast<int32_t>(part->received_splits.size())});
    }
  }
  o->c.code = static_cast<int32_t>(o->status.code());
  o->c.message = o->status.message().c_str();
  o->c.num_results = static_cast<int32_t>(o->results.size());
  o->c.results = o->results.data();
  o->c.value = o->result.value;
  o->c.keep = o;
  o->c.release = &ReleaseOutcome;
  done(context, &o->c);
}

Result<std::vector<TensorView>> Views(int32_t count, const KoloTfTensor* tensors) {
  std::vector<TensorView> views;
  for (int32_t i = 0; i < count; ++i) {
    const KoloTfTensor& t = tensors[i];
    if (t.dtype < 0 || t.dtype >= kNumDataTypes) {
      return Status::InvalidArgument("tensor " + std::to_string(i) + " has dtype code " +
                                     std::to_string(t.dtype) + ", which kolo does not know");
    }
    if (t.device < kCpuDevice) {
      return Status::InvalidArgument("tensor " + std::to_string(i) + " has device code " +
                                     std::to_string(t.device) + ", which is not a device");
    }
    views.push_back(TensorView{t.data, static_cast<DataType>(t.dtype),
                               std::vector<int64_t>(t.shape, t.shape + t.ndim), t.device});
  }
  return views;
}

template <typename Options = CollectiveOptions>
Options Named(const KoloTfRequest& r, const std::string& name) {
  Options o;
  o.name = name;
  if (name.empty()) o.call_site = r.call_site;
  o.process_set = r.process_set;
  o.caller_waits = r.caller_waits != 0;
  o.cuda_stream = r.cuda_stream;
  return o;
}

template <typename Options>
Result<Options> Reducing(const KoloTfRequest& r) {
  if (r.reduce_op < 0 || r.reduce_op >= kNumReduceOps) {
    return Status::InvalidArgument("unknown reduce op code " + std::to_string(r.reduce_op));
  }
  auto o = Named<Options>(r, r.name);
  o.op = static_cast<ReduceOp>(r.reduce_op);
  o.prescale_factor = r.prescale;
  o.postscale_factor = r.postscale;
  return o;
}

// A group of broadcasts (one operation per tensor, named as kolo.common.names'
// member_name does) reported as one: the first error, once the last finishes.
void StartBroadcasts(Runtime& rt, const KoloTfRequest& r, std::vector<TensorView> tensors,
                     KoloTfDone done, void* context) {
  struct Group {
    std::atomic<int> left;
    Mutex mu;
    Status first_error GUARDED_BY(mu);
  };
  auto group = std::make_shared<Group>();
  group->left = static_cast<int>(tensors.size());
  auto finish = [group, done, context](Status s) {
    {
      MutexLock lock(&group->mu);
      if (!s.ok() && group->first_error.ok()) group->first_error = std::move(s);
    }
    if (--group->left != 0) return;
    Status status;
    {
      MutexLock lock(&group->mu);
      status = group->first_error;
    }
    Deliver(KOLO_TF_BROADCAST, std::move(status), WorkResult{}, done, context);
  };
  const std::string base = r.name;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string name = base.empty() || tensors.size() == 1 ? base : base + "." + std::to_string(i);
    Result<Handle> h = rt.EnqueueBroadcast(tensors[i], r.root, Named(r, name));
    if (!h.ok()) {
      finish(h.status());
      continue;
    }
    rt.WhenDone(h.value(), [finish](Status s, WorkResult) { finish(std::move(s)); });
  }
}

Result<Handle> Enqueue(Runtime& rt, const KoloTfRequest& r, const std::vector<TensorView>& in,
                       const std::vector<TensorView>& out) {
  switch (r.kind) {
    case KOLO_TF_ALLREDUCE: {
      KOLO_ASSIGN_OR_RETURN(auto options, Reducing<AllreduceOptions>(r));
      return rt.EnqueueGroupedAllreduce(in, out, options);
    }
    case KOLO_TF_ALLGATHER:
      return rt.EnqueueGroupedAllgather(in, Named(r, r.name));
    case KOLO_TF_ALLTOALL:
      return rt.EnqueueAlltoall(in.at(0), std::vector<int64_t>(r.splits, r.splits + r.num_splits),
                                Named(r, r.name));
    case KOLO_TF_REDUCESCATTER: {
      KOLO_ASSIGN_OR_RETURN(auto options, Reducing<ReducescatterOptions>(r));
      return rt.EnqueueGroupedReducescatter(in, options);
    }
    case KOLO_TF_JOIN:
      return rt.EnqueueJoin(Named(r, ""));
    case KOLO_TF_BARRIER:
      return rt.EnqueueBarrier(Named(r, ""));
    default:
      return Status::InvalidArgument("unknown operation kind " + std::to_string(r.kind));
  }
}

}  // namespace

void StartTfOperation(Runtime* rt, const KoloTfRequest& r, int32_t count,
                      const KoloTfTensor* inputs, const KoloTfTensor* outputs, KoloTfDone done,
                      void* context) {
  if (rt == nullptr || !rt->is_running()) {
    Deliver(r.kind, Status::PreconditionFailed("kolo is not running; call kolo.tensorflow.init()"),
            {}, done, context);
    return;
  }
  Result<std::vector<TensorView>> in = Views(count, inputs);
  Result<std::vector<TensorView>> out = outputs ? Views(count, outputs) : in;
  if (!in.ok() || !out.ok()) {
    Deliver(r.kind, in.ok() ? out.status() : in.status(), {}, done, context);
    return;
  }
  if (r.kind == KOLO_TF_BROADCAST) {
    StartBroadcasts(*rt, r, std::move(out).value(), done, context);
    return;
  }
  Result<Handle> h = Enqueue(*rt, r, in.value(), out.value());
  if (!h.ok()) {
    Deliver(r.kind, h.status(), {}, done, context);
    return;
  }
  const int32_t kind = r.kind;
  if (r.caller_waits) {
    WorkResult result;
    Status s = rt->Wait(h.value(), &result);
    Deliver(kind, std::move(s), std::move(result), done, context);
    return;
  }
  rt->WhenDone(h.value(), [kind, done, context](Status s, WorkResult result) {
    Deliver(kind, std::move(s), std::move(result), done, context);
  });
}

}  // namespace kolo
