// kolo's collectives as TensorFlow ops: async kernels that hand TensorFlow's
// own buffers to kolo's runtime (through kolo._core's C table, kolo_tf_abi.h)
// and finish when the runtime does, so no thread waits and no copy is made
// for an allreduce or a broadcast. Inside tf.function they are stateful ops,
// which TensorFlow runs in program order, so every rank starts them in the
// same order.
//
// This file is compiled against one TensorFlow's headers (its C++ ABI changes
// with each minor version): by the build for the TensorFlow it finds, and by
// kolo.tensorflow's loader for any other, on first import. It includes nothing
// of kolo but the C interface.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "kolo_tf_abi.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

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
  double prescale_ = 1.0, postscale_ = 1.0;
};

// One started operation: what the kernel keeps until kolo reports back.
struct Pending {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  int32_t kind;
  std::vector<std::vector<int64_t>> shapes;  // the views' shapes point here
  std::vector<KoloTfTensor> inputs, outputs;

  void Finish(const KoloTfOutcome& o) {
    absl::Status status = ToTf(o, ctx->op_kernel().type_string());
    for (int32_t i = 0; status.ok() && i < o.num_results; ++i) {
      const KoloTfResult& r = o.results[i];
      TensorShape shape;
      for (int32_t d = 0; d < r.ndim; ++d) shape.AddDim(r.shape[d]);
      Tensor* out = nullptr;
      status = ctx->allocate_output(i, shape, &out);
      if (status.ok() && r.bytes > 0) std::memcpy(out->data(), r.data, r.bytes);
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

KoloTfTensor View(const Tensor& t, Pending& p) {
  p.shapes.emplace_back();
  for (int d = 0; d < t.dims(); ++d) p.shapes.back().push_back(t.dim_size(d));
  // A moved vector keeps its buffer: the pointer stays valid as shapes grows.
  return KoloTfTensor{const_cast<char*>(t.tensor_data().data()), KoloType(t.dtype()),
                      static_cast<int32_t>(t.dims()), p.shapes.back().data()};
}

void CollectiveKernel::ComputeAsync(OpKernelContext* ctx, DoneCallback done) {
  const KoloTfAbi* abi = abi_table.load();
  OP_REQUIRES_ASYNC(
      ctx, abi != nullptr,
      absl::FailedPreconditionError("kolo's TensorFlow ops run once kolo.tensorflow is imported"),
      done);
  auto* p = new Pending{ctx, std::move(done), kind_, {}, {}, {}};
  const bool gathers = kind_ == KOLO_TF_ALLGATHER || kind_ == KOLO_TF_REDUCESCATTER;
  const int count = kind_ == KOLO_TF_ALLTOALL ? 1 : ctx->num_inputs();
  std::vector<int64_t> splits;
  for (int i = 0; i < count; ++i) {
    const Tensor& in = ctx->input(i);
    p->inputs.push_back(View(in, *p));
    if (gathers || kind_ == KOLO_TF_ALLTOALL) continue;
    // allreduce and broadcast write into the output, in place where TensorFlow
    // lets the input's buffer go.
    Tensor* out = nullptr;
    absl::Status s = ctx->forward_input_or_allocate_output({i}, i, in.shape(), &out);
    if (!s.ok()) {
      ctx->SetStatus(s);
      p->done();
      delete p;
      return;
    }
    if (kind_ == KOLO_TF_BROADCAST && out->tensor_data().data() != in.tensor_data().data()) {
      std::memcpy(const_cast<char*>(out->tensor_data().data()), in.tensor_data().data(),
                  in.TotalBytes());
    }
    p->outputs.push_back(View(*out, *p));
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
                        static_cast<int32_t>(splits.size())};
  abi->start(&request, static_cast<int32_t>(p->inputs.size()), p->inputs.data(),
             p->outputs.empty() ? nullptr : p->outputs.data(), &OnDone, p);
}

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

}  // namespace
}  // namespace kolo_tf

extern "C" __attribute__((visibility("default"))) int32_t kolo_tf_set_abi(const KoloTfAbi* abi) {
  if (abi == nullptr || abi->version != KOLO_TF_ABI_VERSION) return -1;
  kolo_tf::abi_table.store(abi);
  return 0;
}

#define KOLO_TF_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"
#define KOLO_TF_NAMING                \
  Attr("tensor_name: string = ''")    \
      .Attr("call_site: string = ''") \
      .Attr("process_set: int = 0")   \
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
