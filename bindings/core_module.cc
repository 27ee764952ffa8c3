// kolo._core: a thin, framework-neutral Python module over the C++ API.
// Tensors cross as (data pointer, dtype, shape, device); nothing here links
// against a framework, so one build serves every PyTorch version. The GIL is
// released while waiting. A Status becomes ValueError (bad argument on this
// rank) or KoloInternalError (collective failure, with the coordinator's text).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include <cstring>
#include <memory>
#include <mutex>

#include "kolo/runtime.h"

namespace py = pybind11;

namespace kolo {
namespace {

// The one runtime of this process (the only mutable global besides logging).
std::unique_ptr<Runtime>& TheRuntime() {
  static std::unique_ptr<Runtime> runtime;
  return runtime;
}

PyObject* g_internal_error = nullptr;

[[noreturn]] void Raise(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument) throw py::value_error(s.message());
  PyErr_SetString(g_internal_error, s.message().c_str());
  throw py::error_already_set();
}

// Whether this process called shutdown() since its last init().
bool g_shut_down_here = false;

// The runtime, for queries and enqueues. After another rank's shutdown the
// runtime stays valid: queries answer and enqueues fail with the reason.
Runtime& Rt() {
  if (!TheRuntime() || g_shut_down_here) {
    Raise(Status(StatusCode::kPreconditionFailed,
                 TheRuntime() ? "kolo is not running (it was shut down); call kolo.init() again"
                              : "kolo is not initialized; call kolo.init() first"));
  }
  return *TheRuntime();
}

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

TensorView View(uintptr_t ptr, int dtype, const std::vector<int64_t>& shape, int device) {
  if (dtype < 0 || dtype >= kNumDataTypes) throw py::type_error("unsupported dtype code");
  return TensorView{reinterpret_cast<void*>(ptr), static_cast<DataType>(dtype), shape, device};
}

template <typename Options = CollectiveOptions>
Options Named(const std::string& name, int process_set, uintptr_t stream = 0) {
  Options o;
  o.name = name;
  o.process_set = process_set;
  o.cuda_stream = reinterpret_cast<void*>(stream);
  return o;
}

// Options of a reducing collective (AllreduceOptions, ReducescatterOptions).
template <typename Options>
Options Reducing(const std::string& name, int op, double prescale, double postscale,
                 int process_set, uintptr_t stream) {
  if (op < 0 || op > static_cast<int>(ReduceOp::kProduct)) {
    throw py::value_error("unknown reduce op code " + std::to_string(op));
  }
  Options o = Named<Options>(name, process_set, stream);
  o.op = static_cast<ReduceOp>(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  return o;
}

// What a finished operation produced, for the Python side to copy out.
struct Output {
  WorkResult result;
  py::tuple shape() const { return py::cast(result.shape); }
  size_t nbytes() const {
    if (result.device == kCpuDevice) return result.data.size();
    size_t n = DataTypeSize(result.dtype);
    for (int64_t d : result.shape) n *= static_cast<size_t>(d);
    return n;
  }
  // `ptr`: host memory, or device memory on the result's device.
  void CopyTo(uintptr_t ptr, size_t bytes) const {
    if (bytes != nbytes()) {
      throw py::value_error("output buffer has " + std::to_string(bytes) + " bytes, result has " +
                            std::to_string(nbytes()));
    }
    if (result.device != kCpuDevice) {
      Status s = CopyDeviceResult(result, reinterpret_cast<void*>(ptr));
      if (!s.ok()) Raise(s);
      return;
    }
    if (bytes > 0) std::memcpy(reinterpret_cast<void*>(ptr), result.data.data(), bytes);
  }
};

Output Wait(Handle h) {
  Output out;
  Status s;
  {
    py::gil_scoped_release release;
    s = Rt().Wait(h, &out.result);
  }
  if (!s.ok()) Raise(s);
  return out;
}

}  // namespace
}  // namespace kolo

PYBIND11_MODULE(_core, m) {
  using namespace kolo;
  m.doc() = "kolo's framework-neutral core (use kolo.torch or kolo.numpy)";
  static py::exception<std::runtime_error> internal(m, "KoloInternalError", PyExc_RuntimeError);
  g_internal_error = internal.ptr();

  // The codes of kolo::DataType and kolo::ReduceOp, by name, for the Python modules.
  py::dict dtypes, ops;
  for (int i = 0; i < kNumDataTypes; ++i) dtypes[DataTypeName(static_cast<DataType>(i))] = i;
  for (int i = 0; i <= static_cast<int>(ReduceOp::kProduct); ++i) {
    ops[ReduceOpName(static_cast<ReduceOp>(i))] = i;
  }
  m.attr("DTYPES") = dtypes;
  m.attr("REDUCE_OPS") = ops;

  m.def(
      "init",
      [](std::vector<std::vector<int>> process_sets, uintptr_t comm_handle) {
        if (TheRuntime() && TheRuntime()->is_running()) return;  // like Horovod: init is idempotent
        InitOptions options;
        options.process_sets = std::move(process_sets);
        // An mpi4py communicator's handle (MPI._handleof(comm)): an Open MPI MPI_Comm.
        if (comm_handle != 0) options.comm = reinterpret_cast<MPI_Comm>(comm_handle);
        TheRuntime() = Check(Runtime::Create(options));
        g_shut_down_here = false;
      },
      py::arg("process_sets") = std::vector<std::vector<int>>(), py::arg("comm_handle") = 0);
  m.def("shutdown", [] {
    if (!TheRuntime()) return;
    g_shut_down_here = true;
    Status s;
    {
      py::gil_scoped_release release;
      s = TheRuntime()->Shutdown();
    }
    if (!s.ok()) Raise(s);
  });
  m.def("is_initialized", [] { return TheRuntime() && TheRuntime()->is_running(); });
  m.def("rank", [] { return Rt().rank(); });
  m.def("size", [] { return Rt().size(); });
  m.def("local_rank", [] { return Rt().local_rank(); });
  m.def("local_size", [] { return Rt().local_size(); });
  m.def("cross_rank", [] { return Rt().cross_rank(); });
  m.def("cross_size", [] { return Rt().cross_size(); });
  m.def("mpi_threads_supported", [] { return Rt().mpi_threads_supported(); });

  m.def("allreduce_async", [](uintptr_t in, uintptr_t out, int dtype, std::vector<int64_t> shape,
                              int device, const std::string& name, int op, double prescale,
                              double postscale, int process_set, uintptr_t stream) {
    return Check(Rt().EnqueueAllreduce(
        View(in, dtype, shape, device), View(out, dtype, shape, device),
        Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set, stream)));
  });
  m.def("allgather_async", [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device,
                              const std::string& name, int process_set, uintptr_t stream) {
    return Check(
        Rt().EnqueueAllgather(View(in, dtype, shape, device), Named(name, process_set, stream)));
  });
  m.def("broadcast_async",
        [](uintptr_t ptr, int dtype, std::vector<int64_t> shape, int device, int root,
           const std::string& name, int process_set, uintptr_t stream) {
          return Check(Rt().EnqueueBroadcast(View(ptr, dtype, shape, device), root,
                                             Named(name, process_set, stream)));
        });
  m.def("grouped_allreduce_async",
        [](std::vector<std::tuple<uintptr_t, uintptr_t, int, std::vector<int64_t>, int>> tensors,
           const std::string& name, int op, double prescale, double postscale, int process_set,
           uintptr_t stream) {
          std::vector<TensorView> in, out;
          for (const auto& [i, o, dtype, shape, device] : tensors) {
            in.push_back(View(i, dtype, shape, device));
            out.push_back(View(o, dtype, shape, device));
          }
          return Check(Rt().EnqueueGroupedAllreduce(
              in, out,
              Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set, stream)));
        });
  m.def("alltoall_async", [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device,
                             std::vector<int64_t> splits, const std::string& name, int process_set,
                             uintptr_t stream) {
    return Check(Rt().EnqueueAlltoall(View(in, dtype, shape, device), splits,
                                      Named(name, process_set, stream)));
  });
  m.def("reducescatter_async",
        [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device, const std::string& name,
           int op, double prescale, double postscale, int process_set, uintptr_t stream) {
          return Check(Rt().EnqueueReducescatter(
              View(in, dtype, shape, device),
              Reducing<ReducescatterOptions>(name, op, prescale, postscale, process_set, stream)));
        });
  m.def("join_async",
        [](int process_set) { return Check(Rt().EnqueueJoin(Named("", process_set))); });
  m.def("barrier_async",
        [](int process_set) { return Check(Rt().EnqueueBarrier(Named("", process_set))); });
  m.def("add_process_set_async",
        [](std::vector<int> ranks) { return Check(Rt().EnqueueAddProcessSet(ranks)); });
  m.def("remove_process_set_async", [](int id) { return Check(Rt().EnqueueRemoveProcessSet(id)); });
  m.def("process_set_ranks", [](int id) { return Check(Rt().ProcessSetRanks(id)); });
  m.def("process_set_rank", [](int id) { return Check(Rt().ProcessSetRank(id)); });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    Status s = Rt().StartTimeline(path, mark_cycles);
    if (!s.ok()) Raise(s);
  });
  m.def("stop_timeline", [] {
    Status s = Rt().StopTimeline();
    if (!s.ok()) Raise(s);
  });
  m.def("poll", [](Handle h) { return Rt().Poll(h); });
  m.def("cuda_built", [] { return BuiltWithCuda(); });
  m.def("gpu_count", [] { return GpuCount(); });
  m.def("wait", &Wait, "Blocks (without the GIL) until the operation finishes.");

  py::class_<Output>(m, "Output")
      .def_property_readonly("shape", &Output::shape)
      .def_property_readonly("received_splits",
                             [](const Output& o) { return o.result.received_splits; })
      .def_property_readonly("value", [](const Output& o) { return o.result.value; })
      .def_property_readonly("nbytes", &Output::nbytes)
      .def_property_readonly("device", [](const Output& o) { return o.result.device; })
      .def("copy_to", &Output::CopyTo);
}
