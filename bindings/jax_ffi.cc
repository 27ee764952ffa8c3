// kolo.jax's allreduce inside jax.jit: an XLA FFI handler that XLA calls with
// the leaves' own buffers, so that a jitted step hands its gradients to kolo
// without the host copies of a Python callback. Only XLA's header-only C API
// is used (jax.ffi.include_dir()); nothing links against jaxlib.
//
// XLA passes an ordering token first, then the leaves; it returns the token,
// then one result per leaf. kolo.jax aliases each result to its leaf, so the
// allreduce normally runs in place on XLA's buffer. The handler blocks until
// the collective finishes: kolo.jax threads JAX's ordered-effect token
// through every collective, so every rank runs them in program order.
//
// Before the leaves, the handler checks that the ranks' trees agree, as
// kolo.jax does for every collective (_structured in kolo/jax/__init__.py):
// a zero-size allreduce whose shape carries a digest of the tree's signature
// (each leaf's path, dtype and shape), and on a mismatch an allgather of the
// signatures, so the error names the first leaf that differs. Done here
// rather than in a Python callback before the call, it costs one small
// negotiation instead of a callback per step (docs/performance.md, section 8).
#include "jax_ffi.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/runtime.h"
#include "tree_signature.h"
#include "xla/ffi/api/ffi.h"

namespace kolo {
namespace {

namespace ffi = xla::ffi;

std::optional<DataType> KoloType(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::U8:
      return DataType::kUInt8;
    case ffi::DataType::S8:
      return DataType::kInt8;
    case ffi::DataType::U16:
      return DataType::kUInt16;
    case ffi::DataType::S16:
      return DataType::kInt16;
    case ffi::DataType::S32:
      return DataType::kInt32;
    case ffi::DataType::S64:
      return DataType::kInt64;
    case ffi::DataType::F16:
      return DataType::kFloat16;
    case ffi::DataType::BF16:
      return DataType::kBFloat16;
    case ffi::DataType::F32:
      return DataType::kFloat32;
    case ffi::DataType::F64:
      return DataType::kFloat64;
    case ffi::DataType::PRED:
      return DataType::kBool;
    default:
      return std::nullopt;
  }
}

ffi::Error ToFfi(const Status& s) {
  ffi::ErrorCode code = s.code() == StatusCode::kInvalidArgument ? ffi::ErrorCode::kInvalidArgument
                                                                 : ffi::ErrorCode::kInternal;
  return ffi::Error(code, s.message());
}

Result<TensorView> View(const ffi::AnyBuffer& buffer, size_t index) {
  std::optional<DataType> dtype = KoloType(buffer.element_type());
  if (!dtype) {
    return Status(StatusCode::kInvalidArgument,
                  "leaf " + std::to_string(index) + " has an XLA type kolo does not support");
  }
  ffi::AnyBuffer::Dimensions dims = buffer.dimensions();
  return TensorView{buffer.untyped_data(), *dtype, std::vector<int64_t>(dims.begin(), dims.end()),
                    kCpuDevice};
}

// Every rank's signature text, in rank order of the set.
Result<std::vector<std::string>> GatherSignatures(Runtime& runtime, std::string_view signature,
                                                  int32_t process_set) {
  int64_t size = static_cast<int64_t>(signature.size());
  std::vector<uint8_t> bytes(signature.begin(), signature.end());
  bytes.resize(std::max<size_t>(bytes.size(), 1));
  CollectiveOptions options;
  options.process_set = process_set;
  Result<Handle> handle = runtime.EnqueueGroupedAllgather(
      {TensorView{&size, DataType::kInt64, {1}, kCpuDevice},
       TensorView{bytes.data(), DataType::kUInt8, {size}, kCpuDevice}},
      options);
  if (!handle.ok()) return handle.status();
  WorkResult result;
  KOLO_RETURN_IF_ERROR(runtime.Wait(handle.value(), &result));
  const WorkResult& sizes = result.parts.at(0);
  const WorkResult& text = result.parts.at(1);
  std::vector<std::string> every;
  size_t offset = 0;
  for (size_t r = 0; r * sizeof(int64_t) < sizes.data.size(); ++r) {
    int64_t n = 0;
    std::memcpy(&n, sizes.data.data() + r * sizeof(int64_t), sizeof(n));
    every.emplace_back(reinterpret_cast<const char*>(text.data.data()) + offset,
                       static_cast<size_t>(n));
    offset += static_cast<size_t>(n);
  }
  return every;
}

// OK when every rank of the set sent a tree with the same signature.
Status CheckTrees(Runtime& runtime, const AllreduceOptions& group, int32_t digest,
                  std::string_view signature) {
  AllreduceOptions options = group;
  if (!options.name.empty()) options.name += ".tree";
  options.op = ReduceOp::kSum;
  options.prescale_factor = options.postscale_factor = 1.0;
  uint8_t unused = 0;
  TensorView sentinel{&unused, DataType::kUInt8, {0, digest}, kCpuDevice};
  Result<Handle> handle = runtime.EnqueueAllreduce(sentinel, sentinel, options);
  if (!handle.ok()) return handle.status();
  Status checked = runtime.Wait(handle.value());
  if (checked.ok() || checked.message().find("ismatch") == std::string::npos) return checked;
  Result<std::vector<std::string>> every = GatherSignatures(runtime, signature, group.process_set);
  if (!every.ok()) return checked;
  std::string difference = FirstDifference(every.value());
  if (difference.empty()) return checked;
  return Status(checked.code(), "allreduce: mismatched trees across the ranks: " + difference);
}

ffi::Error Allreduce(ffi::Token, ffi::RemainingArgs args, ffi::Result<ffi::Token>,
                     ffi::RemainingRets rets, std::string_view name, std::string_view call_site,
                     int32_t op, double prescale, double postscale, int32_t process_set,
                     int32_t tree_digest, std::string_view tree) {
  Runtime* runtime = RunningRuntime();
  if (runtime == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "kolo is not running; call kolo.jax.init() first");
  }
  if (args.size() != rets.size()) {
    return ffi::Error::InvalidArgument("kolo allreduce: " + std::to_string(args.size()) +
                                       " leaves but " + std::to_string(rets.size()) + " results");
  }
  std::vector<TensorView> in, out;
  for (size_t i = 0; i < args.size(); ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> arg = args.get<ffi::AnyBuffer>(i);
    if (arg.has_error()) return arg.error();
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> ret = rets.get<ffi::AnyBuffer>(i);
    if (ret.has_error()) return ret.error();
    Result<TensorView> source = View(*arg, i);
    if (!source.ok()) return ToFfi(source.status());
    Result<TensorView> target = View(**ret, i);
    if (!target.ok()) return ToFfi(target.status());
    in.push_back(std::move(source).value());
    out.push_back(std::move(target).value());
  }
  AllreduceOptions options;
  options.name = std::string(name);
  if (name.empty()) options.call_site = std::string(call_site);
  options.op = static_cast<ReduceOp>(op);
  options.prescale_factor = prescale;
  options.postscale_factor = postscale;
  options.process_set = process_set;
  Status trees = CheckTrees(*runtime, options, tree_digest, tree);
  if (!trees.ok()) return ToFfi(trees);
  Result<Handle> handle = runtime->EnqueueGroupedAllreduce(in, out, options);
  if (!handle.ok()) return ToFfi(handle.status());
  Status done = runtime->Wait(handle.value());
  if (!done.ok()) return ToFfi(done);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(KoloJaxAllreduce, Allreduce,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Token>()
                                  .RemainingArgs()
                                  .Ret<ffi::Token>()
                                  .RemainingRets()
                                  .Attr<std::string_view>("name")
                                  .Attr<std::string_view>("call_site")
                                  .Attr<int32_t>("op")
                                  .Attr<double>("prescale")
                                  .Attr<double>("postscale")
                                  .Attr<int32_t>("process_set")
                                  .Attr<int32_t>("tree_digest")
                                  .Attr<std::string_view>("tree"));

void* JaxAllreduceHandler() { return reinterpret_cast<void*>(KoloJaxAllreduce); }

}  // namespace kolo
