// The checks of every collective's input, made on the calling thread before
// anything is queued (input_checks.h).
#include "input_checks.h"

#include <cmath>
#include <string>

#include "ops/adasum.h"

namespace kolo {
namespace {

Status CheckScaling(DataType dtype, ReduceOp op, double pre, double post) {
  if (!std::isfinite(pre) || !std::isfinite(post)) {
    return Status::InvalidArgument("prescale_factor and postscale_factor must be finite");
  }
  if (dtype == DataType::kBool && (op == ReduceOp::kAverage || pre != 1.0 || post != 1.0)) {
    return Status::InvalidArgument(
        "bool tensors support sum (logical or), min, max and product (logical and), without "
        "scale factors; average is not defined for bool");
  }
  return Status::OK();
}

Status CheckNotEmpty(const std::vector<TensorView>& inputs, const char* op) {
  if (!inputs.empty()) return Status::OK();
  return Status::InvalidArgument(std::string(op) + " needs at least one tensor");
}

}  // namespace

Status CheckTensor(const TensorView& t, const char* what) {
  for (int64_t d : t.shape) {
    if (d < 0) {
      return Status::InvalidArgument(std::string(what) + " has a negative dimension in shape " +
                                     ShapeToString(t.shape));
    }
  }
  if (t.data == nullptr && t.NumElements() > 0) {
    return Status::InvalidArgument(std::string(what) + " has no data pointer");
  }
  if (static_cast<int>(t.dtype) >= kNumDataTypes) {
    return Status::InvalidArgument(std::string(what) + " has an unknown data type");
  }
  return Status::OK();
}

Status CheckHasDimension(const TensorView& t, const char* op, const char* why) {
  if (!t.shape.empty()) return Status::OK();
  return Status::InvalidArgument(std::string(op) + " needs a tensor with at least one dimension" +
                                 why + "; got a scalar");
}

Status CheckAllreduce(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                      const AllreduceOptions& options) {
  if (inputs.empty() || inputs.size() != outputs.size()) {
    return Status::InvalidArgument("allreduce needs as many outputs as inputs, at least one");
  }
  if (static_cast<int>(options.op) >= kNumReduceOps) {
    return Status::InvalidArgument("unknown reduce op code " +
                                   std::to_string(static_cast<int>(options.op)));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    KOLO_RETURN_IF_ERROR(CheckTensor(inputs[i], "allreduce input"));
    KOLO_RETURN_IF_ERROR(CheckTensor(outputs[i], "allreduce output"));
    if (inputs[i].dtype != outputs[i].dtype || inputs[i].shape != outputs[i].shape) {
      return Status::InvalidArgument("allreduce output must have the input's dtype and shape");
    }
    if (inputs[i].device != outputs[i].device) {
      return Status::InvalidArgument("allreduce output is on " + DeviceName(outputs[i].device) +
                                     " but its input on " + DeviceName(inputs[i].device) +
                                     "; both must be on one device");
    }
    KOLO_RETURN_IF_ERROR(CheckScaling(inputs[i].dtype, options.op, options.prescale_factor,
                                      options.postscale_factor));
  }
  return Status::OK();
}

// Where Adasum cannot run, Horovod's refusals, in its order and words
// (horovod/torch/mpi_ops.py), then the dtypes its kernels have: every rank
// refuses before anything is exchanged.
Status CheckAdasum(const std::vector<TensorView>& inputs, int process_set, const Placement& p) {
  if (process_set != kGlobalProcessSet) {
    return Status::Unimplemented("Adasum does not support non-global process sets yet.");
  }
  if (inputs[0].device != kCpuDevice) {
    // Within a host the GPU path sums (NCCL), across hosts it runs Adasum.
    if (!p.homogeneous) {
      return Status::Unimplemented(
          "Running GPU Adasum on heterogeneous cluster is not supported yet.");
    }
    if (!adasum::IsPowerOfTwo(p.size / p.local_size)) {
      return Status::Unimplemented(
          "Running GPU Adasum with non-power of 2 nodes is not supported yet.");
    }
  } else if (!adasum::IsPowerOfTwo(p.size)) {
    return Status::Unimplemented("Running Adasum with non-power of 2 ranks is not supported yet.");
  }
  // Horovod fails the collective ("Unsupported data type", HorovodInternalError);
  // kolo fails it with the same class before anything is sent.
  for (const TensorView& input : inputs) {
    if (!adasum::Supports(input.dtype)) {
      return Status::PreconditionFailed(
          std::string("Adasum reduces float16, float32 and float64 tensors (Horovod's kernels "
                      "have no other types), not ") +
          DataTypeName(input.dtype));
    }
  }
  return Status::OK();
}

Status CheckAllgather(const std::vector<TensorView>& inputs) {
  KOLO_RETURN_IF_ERROR(CheckNotEmpty(inputs, "allgather"));
  for (const TensorView& input : inputs) {
    KOLO_RETURN_IF_ERROR(CheckTensor(input, "allgather input"));
    KOLO_RETURN_IF_ERROR(
        CheckHasDimension(input, "allgather", " (it concatenates along dimension 0)"));
  }
  return Status::OK();
}

Status CheckBroadcast(const TensorView& tensor, int root_rank, int n) {
  KOLO_RETURN_IF_ERROR(CheckTensor(tensor, "broadcast tensor"));
  if (root_rank < 0 || root_rank >= n) {
    return Status::InvalidArgument("broadcast root_rank " + std::to_string(root_rank) +
                                   " is out of range: the process set has ranks 0.." +
                                   std::to_string(n - 1));
  }
  return Status::OK();
}

Status CheckReducescatter(const std::vector<TensorView>& inputs,
                          const ReducescatterOptions& options) {
  KOLO_RETURN_IF_ERROR(CheckNotEmpty(inputs, "reducescatter"));
  if (options.op != ReduceOp::kSum && options.op != ReduceOp::kAverage) {
    return Status::InvalidArgument(std::string("reducescatter supports sum and average, not ") +
                                   ReduceOpName(options.op));
  }
  for (const TensorView& input : inputs) {
    KOLO_RETURN_IF_ERROR(CheckTensor(input, "reducescatter input"));
    KOLO_RETURN_IF_ERROR(CheckHasDimension(input, "reducescatter", ""));
    KOLO_RETURN_IF_ERROR(
        CheckScaling(input.dtype, options.op, options.prescale_factor, options.postscale_factor));
  }
  return Status::OK();
}

// The rows `input` sends to each rank: `splits`, or an even split when empty.
Result<std::vector<int64_t>> AlltoallSplits(const TensorView& input,
                                            const std::vector<int64_t>& splits, int n) {
  const int64_t rows = input.shape[0];
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    if (rows % n != 0) {
      return Status::InvalidArgument("alltoall without splits needs dimension 0 (" +
                                     std::to_string(rows) + ") divisible by the number of ranks (" +
                                     std::to_string(n) + "); pass splits");
    }
    s.assign(n, rows / n);
  }
  if (static_cast<int>(s.size()) != n) {
    return Status::InvalidArgument("alltoall splits has " + std::to_string(s.size()) +
                                   " entries but the process set has " + std::to_string(n) +
                                   " ranks; give one split per rank");
  }
  int64_t sum = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) {
      return Status::InvalidArgument("alltoall splits must not be negative (split " +
                                     std::to_string(i) + " is " + std::to_string(s[i]) + ")");
    }
    sum += s[i];
  }
  if (sum != rows) {
    return Status::InvalidArgument("alltoall splits sum to " + std::to_string(sum) +
                                   " but the tensor's dimension 0 is " + std::to_string(rows));
  }
  return s;
}

}  // namespace kolo
