// kolo's collectives as TensorFlow ops: async kernels that hand TensorFlow's
// own buffers to kolo's runtime (through kolo._core's C table, kolo_tf_abi.h)
// and finish when the runtime does, so no thread waits and no copy is made
// for an allreduce or a broadcast. Built with KOLO_TF_GPU, the ops have GPU
// kernels too (kolo_tf_device.h): the tensors stay in the GPU's memory, kolo's
// NCCL work is ordered after TensorFlow's stream for the op, and the kernel
// finishes once the result is in its output. Inside tf.function they are
// stateful ops, which TensorFlow runs in program order, so every rank starts
// them in the same order.
//
// Inside XLA (tf.function(jit_compile=True)) the grouped allreduce is an XLA
// custom call instead (XlaGroupedAllreduce below).
//
// This file is compiled against one TensorFlow's headers (its C++ ABI changes
// with each minor version): by the build for the TensorFlow it finds, and by
// kolo.tensorflow's loader for any other, on first import. It includes nothing
// of kolo but the C interface and kolo_tf_device.h, which ship beside it.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "kolo_tf_abi.h"
#include "kolo_tf_device.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "xla/service/custom_call_status_internal.h"
#include "xla/service/custom_call_target_registry.h"

namespace kolo_tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// Set once, by kolo.tensorflow right after loading the library, before any op runs.
std::atomic<const KoloTfAbi*> abi_table{nullptr};

int32_t KoloType(DataType t) {
  switch (t) {
    case ::tensorflow::DT_UINT8:
      return KOLO_TF_UINT8;
    case ::tensorflow::DT_INT8:
      return KOLO_TF_INT8;
    case ::tensorflow::DT_UINT16:
      return KOLO_TF_UINT16;
    case ::tensorflow::DT_INT16:
      return KOLO_TF_INT16;
    case ::tensorflow::DT_INT32:
      return KOLO_TF_INT32;
    case ::tensorflow::DT_INT64:
      return KOLO_TF_INT64;
    case ::tensorflow::DT_HALF:
      return KOLO_TF_FLOAT16;
    case ::tensorflow::DT_BFLOAT16:
      return KOLO_TF_BFLOAT16;
    case ::tensorflow::DT_FLOAT:
      return KOLO_TF_FLOAT32;
    case ::tensorflow::DT_DOUBLE:
      return KOLO_TF_FLOAT64;
    case ::tensorflow::DT_BOOL:
      return KOLO_TF_BOOL;
    default:
      return -1;
  }
}

// kolo's error as the class Horovod's ops raise: a bad argument on this rank
// is InvalidArgument, a collective that failed (ranks disagreed, kolo shut
// down, a peer was lost) FailedPrecondition. The op's type ends the message:
// out of a tf.function TensorFlow names no node, and elastic training tells a
// failed collective from the user's own FailedPrecondition by it.
absl::Status ToTf(const KoloTfOutcome& o, const std::string& op) {
  if (o.code == KOLO_TF_OK) return absl::OkStatus();
  const std::string message = std::string(o.message) + " (op " + op + ")";
  if (o.code == KOLO_TF_INVALID_ARGUMENT) return absl::InvalidArgumentError(message);
  return absl::FailedPreconditionError(message);
}

// One kernel class for every op; `kind` says which collective it starts.
class CollectiveKernel : public AsyncOpKernel {
 public:
  CollectiveKernel(OpKernelConstruction* c, int32_t kind) : AsyncOpKernel(c), kind_(kind) {
    float prescale = 1.0f, postscale = 1.0f;
    if (c->HasAttr("tensor_name")) OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name_));
    if (c->HasAttr("call_site")) OP_REQUIRES_OK(c, c->GetAttr("call_site", &call_site_));
    if (c->HasAttr("process_set")) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
    if (c->HasAttr("reduce_op")) OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    if (c->HasAttr("root_rank")) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    if (c->HasAttr("caller_waits")) OP_REQUIRES_OK(c, c->GetAttr("caller_waits", &caller_waits_));
    if (c->HasAttr("prescale_factor")) OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale));
    if (c->HasAttr("postscale_factor")) {
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale));
    }
    prescale_ = prescale;
    postscale_ = postscale;
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override;

 private:
  const int32_t kind_;
  std::string name_, call_site_;
  int process_set_ = 0, reduce_op_ = 0, root_ = 0;
  bool caller_waits_ = false;
  double prescale_ = 1.0, postscale_ = 1.0;
};

// One started operation: what the kernel keeps until kolo reports back.
struct Pending {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  int32_t kind;
  OpDevice device;

  void Finish(const KoloTfOutcome& o) {
    absl::Status status = ToTf(o, ctx->op_kernel().type_string());
    bool copied_on_device = false;
    for (int32_t i = 0; status.ok() && i < o.num_results; ++i) {
      const KoloTfResult& r = o.results[i];
      TensorShape shape;
      for (int32_t d = 0; d < r.ndim; ++d) shape.AddDim(r.shape[d]);
      Tensor* out = nullptr;
      status = ctx->allocate_output(i, shape, &out);
      if (status.ok() && r.bytes > 0 && r.device != KOLO_TF_HOST) {
        // Into TensorFlow's output on its own stream, where the allocator
        // orders the buffer's reuse.
        status = device.CopyOnDevice(out->data(), r.data, r.bytes);
        copied_on_device = true;
      } else if (status.ok() && r.bytes > 0) {
        std::memcpy(out->data(), r.data, r.bytes);
      }
      if (status.ok() && kind == KOLO_TF_ALLTOALL) {
        Tensor* splits = nullptr;
        status = ctx->allocate_output(1, TensorShape({r.num_received_splits}), &splits);
        for (int32_t s = 0; status.ok() && s < r.num_received_splits; ++s) {
          splits->flat<int32_t>()(s) = static_cast<int32_t>(r.received_splits[s]);
        }
      }
    }
    if (status.ok() && kind == KOLO_TF_JOIN) {
      Tensor* last = nullptr;
      status = ctx->allocate_output(0, TensorShape({}), &last);
      if (status.ok()) last->scalar<int32_t>()() = o.value;
    }
    // The results' memory goes with the outcome: the copies finish first, and
    // the op is done when its outputs hold the values.
    if (copied_on_device) status.Update(device.Synchronize());
    ctx->SetStatus(status);
    o.release(o.keep);
    done();
  }
};

// Called on kolo's thread: the rest runs on TensorFlow's, so that kolo's
// thread never runs the kernels that TensorFlow would start inline next.
void OnDone(void* context, const KoloTfOutcome* outcome) {
  auto* pending = static_cast<Pending*>(context);
  pending->ctx->device()->tensorflow_cpu_worker_threads()->workers->Schedule([pending, outcome] {
    pending->Finish(*outcome);
    delete pending;
  });
}

// `t`, in the memory of `device` (KOLO_TF_HOST or a GPU), as the C table sees
// it; its shape is kept in `shapes`, which start() reads.
KoloTfTensor View(const Tensor& t, int32_t device, std::vector<std::vector<int64_t>>* shapes) {
  shapes->emplace_back();
  for (int d = 0; d < t.dims(); ++d) shapes->back().push_back(t.dim_size(d));
  // A moved vector keeps its buffer: the pointer stays valid as shapes grows.
  return KoloTfTensor{const_cast<char*>(t.tensor_data().data()), KoloType(t.dtype()),
                      static_cast<int32_t>(t.dims()), shapes->back().data(), device};
}

void CollectiveKernel::ComputeAsync(OpKernelContext* ctx, DoneCallback done) {
  const KoloTfAbi* abi = abi_table.load();
  OP_REQUIRES_ASYNC(
      ctx, abi != nullptr,
      absl::FailedPreconditionError("kolo's TensorFlow ops run once kolo.tensorflow is imported"),
      done);
  const bool gathers = kind_ == KOLO_TF_ALLGATHER || kind_ == KOLO_TF_REDUCESCATTER;
  const int count = kind_ == KOLO_TF_ALLTOALL ? 1 : ctx->num_inputs();
  const OpDevice device(ctx);
  std::vector<std::vector<int64_t>> shapes;  // what the views' shapes point at
  std::vector<KoloTfTensor> inputs, outputs;
  std::vector<int64_t> splits;
  for (int i = 0; i < count; ++i) {
    const Tensor& in = ctx->input(i);
    inputs.push_back(View(in, device.InputDevice(ctx, i), &shapes));
    if (gathers || kind_ == KOLO_TF_ALLTOALL) continue;
    // allreduce and broadcast write into the output, in place where TensorFlow
    // lets the input's buffer go.
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({i}, i, in.shape(), &out),
                         done);
    const int32_t out_device = device.OutputDevice(ctx, i);
    char* out_data = const_cast<char*>(out->tensor_data().data());
    if (kind_ == KOLO_TF_BROADCAST && out_data != in.tensor_data().data()) {
      if (out_device == KOLO_TF_HOST) {
        std::memcpy(out_data, in.tensor_data().data(), in.TotalBytes());
      } else {  // on TensorFlow's stream, which kolo's collective then waits for
        OP_REQUIRES_OK_ASYNC(
            ctx, device.CopyOnDevice(out_data, in.tensor_data().data(), in.TotalBytes()), done);
      }
    }
    outputs.push_back(View(*out, out_device, &shapes));
  }
  if (kind_ == KOLO_TF_ALLTOALL) {
    auto given = ctx->input(1).flat<int32_t>();
    for (int64_t i = 0; i < given.size(); ++i) splits.push_back(given(i));
  }
  KoloTfRequest request{kind_,
                        name_.c_str(),
                        call_site_.c_str(),
                        process_set_,
                        reduce_op_,
                        prescale_,
                        postscale_,
                        root_,
                        splits.data(),
                        static_cast<int32_t>(splits.size()),
                        caller_waits_ ? 1 : 0,
                        device.cuda_stream()};
  // start() copies what it needs; the kernel keeps only what Finish uses.
  abi->start(&request, static_cast<int32_t>(inputs.size()), inputs.data(),
             outputs.empty() ? nullptr : outputs.data(), &OnDone,
             new Pending{ctx, std::move(done), kind_, device});
}

#if KOLO_TF_GPU
// The GPU kernels' dtypes: those NCCL carries and TensorFlow keeps in a GPU's
// memory. int32 lives in host memory on TensorFlow's GPU devices and NCCL has
// no 16-bit integers, so those run on the CPU kernels, to which TensorFlow
// copies them. Join and barrier have no tensors and run on the CPU.
const ::tensorflow::DataType kGpuTypes[] = {::tensorflow::DT_UINT8,    ::tensorflow::DT_INT8,
                                            ::tensorflow::DT_INT64,    ::tensorflow::DT_HALF,
                                            ::tensorflow::DT_BFLOAT16, ::tensorflow::DT_FLOAT,
                                            ::tensorflow::DT_DOUBLE,   ::tensorflow::DT_BOOL};
#endif

template <int32_t kKind>
class Kernel : public CollectiveKernel {
 public:
  explicit Kernel(OpKernelConstruction* c) : CollectiveKernel(c, kKind) {}
};

// Shape functions.
absl::Status SameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

ShapeHandle RowsUnknown(InferenceContext* c, ShapeHandle s) {
  if (!c->RankKnown(s) || c->Rank(s) == 0) return c->UnknownShape();
  ShapeHandle out;
  if (!c->ReplaceDim(s, 0, c->UnknownDim(), &out).ok()) return c->UnknownShape();
  return out;
}

absl::Status RowsShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, RowsUnknown(c, c->input(i)));
  return absl::OkStatus();
}

// --- inside XLA ---------------------------------------------------------------
//
// kolo.tensorflow emits XlaCustomCallV2 (XLA's status-returning custom-call API)
// with the collective's settings and the tensors' dtypes and shapes as text, a
// line each: name, call site, "op prescale postscale process_set", the count,
// then "dtype ndim dims..." per tensor. The call blocks XLA's thread until the
// runtime finishes; every rank's compiled program runs its custom calls in the
// same order.
struct XlaGroup {
  std::string name, call_site;
  int op = 0, process_set = 0;
  double prescale = 1, postscale = 1;
  std::vector<int32_t> dtypes;
  std::vector<std::vector<int64_t>> shapes;
};

bool ParseXlaGroup(const std::string& text, XlaGroup* g) {
  std::istringstream in(text);
  int count = 0;
  std::string numbers;
  if (!std::getline(in, g->name) || !std::getline(in, g->call_site) || !std::getline(in, numbers)) {
    return false;
  }
  std::istringstream(numbers) >> g->op >> g->prescale >> g->postscale >> g->process_set;
  if (!(in >> count) || count < 1) return false;
  for (int i = 0; i < count; ++i) {
    int32_t dtype = 0, ndim = 0;
    if (!(in >> dtype >> ndim) || ndim < 0) return false;
    g->dtypes.push_back(dtype);
    g->shapes.emplace_back(ndim);
    for (int64_t& d : g->shapes.back()) {
      if (!(in >> d)) return false;
    }
  }
  return true;
}

struct XlaWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty: success
};

void OnXlaDone(void* context, const KoloTfOutcome* o) {
  auto* wait = static_cast<XlaWait*>(context);
  {
    std::lock_guard<std::mutex> lock(wait->mu);
    if (o->code != KOLO_TF_OK) {
      wait->error = std::string(o->message) + " (op KoloXlaGroupedAllreduce)";
    }
    wait->done = true;
  }
  o->release(o->keep);
  wait->cv.notify_all();
}

// XLA's CPU custom-call signature (API_VERSION_STATUS_RETURNING_UNIFIED): one
// result buffer, or for several a table of them. The status is set through
// XlaCustomCallStatus_'s layout, which this TensorFlow's headers give: the
// setter is not exported.
void XlaGroupedAllreduce(void* out, const void** in, const char* opaque, size_t opaque_len,
                         XlaCustomCallStatus* status) {
  XlaGroup g;
  const KoloTfAbi* abi = abi_table.load();
  if (abi == nullptr || !ParseXlaGroup(std::string(opaque, opaque_len), &g)) {
    status->message = abi == nullptr ? "kolo's TensorFlow ops run once kolo.tensorflow is imported"
                                     : "kolo's XLA allreduce got settings it cannot read";
    return;
  }
  const size_t n = g.dtypes.size();
  std::vector<KoloTfTensor> inputs, outputs;
  for (size_t i = 0; i < n; ++i) {
    void* target = n == 1 ? out : static_cast<void**>(out)[i];
    const int32_t ndim = static_cast<int32_t>(g.shapes[i].size());
    inputs.push_back(KoloTfTensor{const_cast<void*>(in[i]), g.dtypes[i], ndim, g.shapes[i].data(),
                                  KOLO_TF_HOST});
    outputs.push_back(KoloTfTensor{target, g.dtypes[i], ndim, g.shapes[i].data(), KOLO_TF_HOST});
  }
  KoloTfRequest request{KOLO_TF_ALLREDUCE,
                        g.name.c_str(),
                        g.call_site.c_str(),
                        g.process_set,
                        g.op,
                        g.prescale,
                        g.postscale,
                        0,
                        nullptr,
                        0,
                        1,
                        nullptr};
  XlaWait wait;
  abi->start(&request, static_cast<int32_t>(n), inputs.data(), outputs.data(), &OnXlaDone, &wait);
  std::unique_lock<std::mutex> lock(wait.mu);
  wait.cv.wait(lock, [&] { return wait.done; });
  if (!wait.error.empty()) status->message = wait.error;
}

}  // namespace
}  // namespace kolo_tf

XLA_CPU_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM("kolo_tf_grouped_allreduce",
                                             kolo_tf::XlaGroupedAllreduce);

extern "C" __attribute__((visibility("default"))) int32_t kolo_tf_set_abi(const KoloTfAbi* abi) {
  if (abi == nullptr || abi->version != KOLO_TF_ABI_VERSION) return -1;
  kolo_tf::abi_table.store(abi);
  return 0;
}

#define KOLO_TF_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"
#define KOLO_TF_NAMING                    \
  Attr("tensor_name: string = ''")        \
      .Attr("call_site: string = ''")     \
      .Attr("process_set: int = 0")       \
      .Attr("caller_waits: bool = false") \
      .SetIsStateful()
#define KOLO_TF_SCALING \
  Attr("reduce_op: int").Attr("prescale_factor: float = 1.0").Attr("postscale_factor: float = 1.0")

REGISTER_OP("KoloAllreduce")
    .Input("tensor: T")
    .Output("reduced: T")
    .Attr("T: " KOLO_TF_TYPES)
    .KOLO_TF_SCALING.KOLO_TF_NAMING.SetShapeFn(kolo_tf::SameShapes);
REGISTER_OP("KoloGroupedAllreduce")
    .Input("tensors: T")
    .Output("reduced: T")
    .Attr("T: list(" KOLO_TF_TYPES ")")
    .KOLO_TF_SCALING.KOLO_TF_NAMING.SetShapeFn(kolo_tf::SameShapes);
REGISTER_OP("KoloAllgather")
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr("T: " KOLO_TF_TYPES)
    .KOLO_TF_NAMING.SetShapeFn(kolo_tf::RowsShapes);
REGISTER_OP("KoloGroupedAllgather")
    .Input("tensors: T")
    .Output("gathered: T")
    .Attr("T: list(" KOLO_TF_TYPES ")")
    .KOLO_TF_NAMING.SetShapeFn(kolo_tf::RowsShapes);
REGISTER_OP("KoloBroadcast")
    .Input("tensor: T")
    .Output("broadcast: T")
    .Attr("T: " KOLO_TF_TYPES)
    .Attr("root_rank: int")
    .KOLO_TF_NAMING.SetShapeFn(kolo_tf::SameShapes);
REGISTER_OP("KoloGroupedBroadcast")
    .Input("tensors: T")
    .Output("broadcast: T")
    .Attr("T: list(" KOLO_TF_TYPES ")")
    .Attr("root_rank: int")
    .KOLO_TF_NAMING.SetShapeFn(kolo_tf::SameShapes);
REGISTER_OP("KoloReducescatter")
    .Input("tensor: T")
    .Output("scattered: T")
    .Attr("T: " KOLO_TF_TYPES)
    .KOLO_TF_SCALING.KOLO_TF_NAMING.SetShapeFn(kolo_tf::RowsShapes);
REGISTER_OP("KoloGroupedReducescatter")
    .Input("tensors: T")
    .Output("scattered: T")
    .Attr("T: list(" KOLO_TF_TYPES ")")
    .KOLO_TF_SCALING.KOLO_TF_NAMING.SetShapeFn(kolo_tf::RowsShapes);
REGISTER_OP("KoloAlltoall")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("received: T")
    .Output("received_splits: int32")
    .Attr("T: " KOLO_TF_TYPES)
    .KOLO_TF_NAMING.SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, kolo_tf::RowsUnknown(c, c->input(0)));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });
REGISTER_OP("KoloJoin")
    .Output("last_joined: int32")
    .KOLO_TF_NAMING.SetShapeFn(::tensorflow::shape_inference::ScalarShape);
REGISTER_OP("KoloBarrier").KOLO_TF_NAMING.SetShapeFn(::tensorflow::shape_inference::NoOutputs);

#define KOLO_TF_KERNEL(op, kind) \
  REGISTER_KERNEL_BUILDER(Name(op).Device(::tensorflow::DEVICE_CPU), kolo_tf::Kernel<kind>)
#if KOLO_TF_GPU
#define KOLO_TF_GPU_KERNEL(op) \
  Name(op).Device(::tensorflow::DEVICE_GPU).TypeConstraint("T", kolo_tf::kGpuTypes)
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloAllreduce"), kolo_tf::Kernel<KOLO_TF_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloGroupedAllreduce"),
                        kolo_tf::Kernel<KOLO_TF_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloAllgather"), kolo_tf::Kernel<KOLO_TF_ALLGATHER>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloGroupedAllgather"),
                        kolo_tf::Kernel<KOLO_TF_ALLGATHER>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloBroadcast"), kolo_tf::Kernel<KOLO_TF_BROADCAST>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloGroupedBroadcast"),
                        kolo_tf::Kernel<KOLO_TF_BROADCAST>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloReducescatter"),
                        kolo_tf::Kernel<KOLO_TF_REDUCESCATTER>);
REGISTER_KERNEL_BUILDER(KOLO_TF_GPU_KERNEL("KoloGroupedReducescatter"),
                        kolo_tf::Kernel<KOLO_TF_REDUCESCATTER>);
REGISTER_KERNEL_BUILDER(
    KOLO_TF_GPU_KERNEL("KoloAlltoall").HostMemory("splits").HostMemory("received_splits"),
    kolo_tf::Kernel<KOLO_TF_ALLTOALL>);
#endif
KOLO_TF_KERNEL("KoloAllreduce", KOLO_TF_ALLREDUCE);
KOLO_TF_KERNEL("KoloGroupedAllreduce", KOLO_TF_ALLREDUCE);
KOLO_TF_KERNEL("KoloAllgather", KOLO_TF_ALLGATHER);
KOLO_TF_KERNEL("KoloGroupedAllgather", KOLO_TF_ALLGATHER);
KOLO_TF_KERNEL("KoloBroadcast", KOLO_TF_BROADCAST);
KOLO_TF_KERNEL("KoloGroupedBroadcast", KOLO_TF_BROADCAST);
KOLO_TF_KERNEL("KoloReducescatter", KOLO_TF_REDUCESCATTER);
KOLO_TF_KERNEL("KoloGroupedReducescatter", KOLO_TF_REDUCESCATTER);
KOLO_TF_KERNEL("KoloAlltoall", KOLO_TF_ALLTOALL);
KOLO_TF_KERNEL("KoloJoin", KOLO_TF_JOIN);
KOLO_TF_KERNEL("KoloBarrier", KOLO_TF_BARRIER);
