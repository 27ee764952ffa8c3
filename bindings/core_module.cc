// kolo._core: the Python module over kolo's C++ Runtime that the framework
// modules (kolo.torch, kolo.numpy) call. Tensors cross as (data pointer, dtype
// code, shape, device); nothing here links against a framework, so one build
// serves every PyTorch version. Besides passing calls through, it
//  - keeps what it holds between calls (the runtime, whether this process shut
//    it down, the KoloInternalError type) in one ModuleState;
//  - gives an unnamed collective its Python call site, so that ranks out of
//    step are told which lines disagree;
//  - waits without the GIL, waking to let Python run signal handlers;
//  - turns a Status into ValueError (a bad argument on this rank),
//    NotImplementedError (a collective refused where Horovod refuses it as
//    not implemented: Adasum's process sets and sizes) or KoloInternalError
//    (anything else: a failed collective, with the coordinator's text, or
//    kolo not running).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "c10d_mpi.h"
#include "kolo/launch_settings.h"
#include "kolo/runtime.h"
#include "tensor_reader.h"
#include "tree_signature.h"
#ifdef KOLO_HAVE_XLA_FFI
#include "jax_ffi.h"
#endif

namespace py = pybind11;

namespace kolo {
namespace {

// What the module keeps between calls. Its one instance, State(), lives as
// long as the process (CPython never unloads an extension module); every
// call reaches it holding the GIL, which serializes them, except where a
// call lets the GIL go: shutdown() (while the background thread ends) and
// waits. So init() and shutdown() also take `lifecycle_`, and the runtime is
// shared with the calls that wait without the GIL: two Python threads that
// call init() and shutdown() at once run one after the other, and a runtime
// that init() replaces lives until its last waiter returns (they used to
// shut one runtime down twice at once, or free it under a running shutdown).
class ModuleState {
 public:
  bool running() const { return runtime_ && runtime_->is_running(); }
  // The runtime unless this process has not made it or shut it down; no GIL
  // needed (for threads that XLA runs).
  Runtime* runtime_or_null() const { return shut_down_here_ ? nullptr : runtime_.get(); }

  // Makes the runtime, unless one is running (like Horovod's, init() is
  // idempotent).
  void Init(const InitOptions& options);
  // Marks the runtime shut down here, then shuts it down without the GIL.
  void Shutdown();

  // The runtime, for queries and enqueues; raises when kolo is not
  // initialized or this process shut it down. After another rank's shutdown
  // it stays valid: queries answer and enqueues fail with the reason.
  Runtime& runtime();
  // The same, shared: for a call that lets the GIL go while it uses it.
  std::shared_ptr<Runtime> shared_runtime() {
    runtime();  // raises when there is none
    return runtime_;
  }

  // `enqueue`: the error of an Enqueue* call, which announced a refusal
  // itself; the exception says so (its `_kolo_core` attribute), so that the
  // Python side does not announce it again.
  [[noreturn]] void Raise(const Status& s, bool enqueue = false) const;
  // Holds the KoloInternalError type for good: Python may be finalized
  // before this object is destroyed, so the reference is never released.
  void set_internal_error(py::object type) { internal_error_ = type.release().ptr(); }

  // Directories whose frames are not the user's: kolo's package and the
  // frameworks it wraps (their autograd machinery calls kolo's functions).
  // Looked up on first use, once the frameworks are imported.
  const std::vector<std::string>& InternalDirs();

 private:
  // Waits for `lifecycle_` without the GIL (its holder may need the GIL), then
  // takes the GIL back.
  std::unique_lock<std::mutex> LockLifecycle();

  std::mutex lifecycle_;  // held through init() and shutdown()
  // Written with the GIL and `lifecycle_` held; read with either.
  std::shared_ptr<Runtime> runtime_;
  std::atomic<bool> shut_down_here_{false};  // shutdown() was called since the last init()
  PyObject* internal_error_ = nullptr;
  std::optional<std::vector<std::string>> internal_dirs_;
};

ModuleState& State() {
  static ModuleState state;
  return state;
}

void ModuleState::Raise(const Status& s, bool enqueue) const {
  PyObject* type = s.code() == StatusCode::kInvalidArgument ? PyExc_ValueError : internal_error_;
  // Refused when started: what kolo (like Horovod) does not run. Once
  // started, a failure is the collective's (KoloInternalError).
  if (enqueue && s.code() == StatusCode::kUnimplemented) type = PyExc_NotImplementedError;
  if (!enqueue) {
    if (type == PyExc_ValueError) throw py::value_error(s.message());
    PyErr_SetString(type, s.message().c_str());
    throw py::error_already_set();
  }
  py::object error = py::reinterpret_borrow<py::object>(type)(s.message());
  error.attr("_kolo_core") = true;
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

std::unique_lock<std::mutex> ModuleState::LockLifecycle() {
  py::gil_scoped_release release;
  return std::unique_lock<std::mutex>(lifecycle_);
}

void ModuleState::Init(const InitOptions& options) {
  std::unique_lock<std::mutex> lock = LockLifecycle();
  if (running()) return;
  if (runtime_ && !shut_down_here_) {
    // init() is collective over every rank. kolo stopped here on its own (no
    // shutdown() on this rank): another rank shut it down, or the background
    // thread failed; the other ranks are not starting it again with this one,
    // and a new start would wait for them forever.
    Raise(Status(StatusCode::kPreconditionFailed,
                 "kolo cannot start again on this rank: it stopped without shutdown() being "
                 "called here (" +
                     runtime_->stop_reason() +
                     "), so the other ranks are not starting it with this one and init() would "
                     "wait for them forever. Let the process end (kolorun reports each rank's "
                     "exit) and start the job again."));
  }
  Result<std::unique_ptr<Runtime>> created = Runtime::Create(options);
  if (!created.ok()) Raise(created.status());
  runtime_ = std::move(created).value();
  shut_down_here_ = false;
}

void ModuleState::Shutdown() {
  Status s;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(lifecycle_);
    if (!runtime_) return;
    shut_down_here_ = true;
    s = runtime_->Shutdown();
  }
  if (!s.ok()) Raise(s);
}

Runtime& ModuleState::runtime() {
  if (!runtime_ || shut_down_here_) {
    Raise(Status(StatusCode::kPreconditionFailed,
                 runtime_ ? "kolo is not running (it was shut down); call kolo.init() again"
                          : "kolo is not initialized; call kolo.init() first"));
  }
  return *runtime_;
}

const std::vector<std::string>& ModuleState::InternalDirs() {
  if (internal_dirs_) return *internal_dirs_;
  std::vector<std::string> dirs;
  py::object path = py::module_::import("os").attr("path");
  py::dict modules = py::module_::import("sys").attr("modules");
  for (const char* name : {"kolo", "torch", "tensorflow", "keras", "jax"}) {
    if (!modules.contains(name)) continue;
    py::object file = py::getattr(modules[name], "__file__", py::none());
    if (file.is_none()) continue;
    dirs.push_back(py::str(path.attr("dirname")(file)).cast<std::string>() + "/");
  }
  internal_dirs_ = std::move(dirs);
  return *internal_dirs_;
}

[[noreturn]] void Raise(const Status& s) { State().Raise(s); }

// The runtime, for queries and enqueues (see ModuleState::runtime).
Runtime& Rt() { return State().runtime(); }

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// The handle of an Enqueue* call, or its error (see ModuleState::Raise).
Handle Enqueued(Result<Handle> r) {
  if (!r.ok()) State().Raise(r.status(), /*enqueue=*/true);
  return r.value();
}

TensorView View(uintptr_t ptr, int dtype, const std::vector<int64_t>& shape, int device) {
  if (dtype < 0 || dtype >= kNumDataTypes) throw py::type_error("unsupported dtype code");
  return TensorView{reinterpret_cast<void*>(ptr), static_cast<DataType>(dtype), shape, device};
}

// Where the Python code that called an unnamed collective is ("train.py:57 in
// step"): the innermost frame outside kolo and the frameworks. Ranks that pair
// an unnamed collective from different places and disagree are out of step.
std::string CallSite() {
  const std::vector<std::string>& internal = State().InternalDirs();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string site;
  while (frame != nullptr && site.empty()) {
    py::object code =
        py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)));
    std::string file = py::str(code.attr("co_filename")).cast<std::string>();
    bool mine = std::none_of(internal.begin(), internal.end(), [&](const std::string& dir) {
      return file.compare(0, dir.size(), dir) == 0;
    });
    if (mine) {
      site = file.substr(file.find_last_of('/') + 1) + ":" +
             std::to_string(PyFrame_GetLineNumber(frame)) + " in " +
             py::str(code.attr("co_name")).cast<std::string>();
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

std::vector<TensorView> Views(
    const std::vector<std::tuple<uintptr_t, int, std::vector<int64_t>, int>>& tensors) {
  std::vector<TensorView> views;
  for (const auto& [ptr, dtype, shape, device] : tensors) {
    views.push_back(View(ptr, dtype, shape, device));
  }
  return views;
}

template <typename Options = CollectiveOptions>
Options Named(const std::string& name, int process_set, uintptr_t stream = 0) {
  Options o;
  o.name = name;
  if (name.empty()) o.call_site = CallSite();
  o.process_set = process_set;
  o.cuda_stream = reinterpret_cast<void*>(stream);
  return o;
}

// Options of a reducing collective (AllreduceOptions, ReducescatterOptions).
template <typename Options>
Options Reducing(const std::string& name, int op, double prescale, double postscale,
                 int process_set, uintptr_t stream) {
  if (op < 0 || op >= kNumReduceOps) {
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

// How long a waiting thread sleeps between looks at Python's signals.
constexpr double kSignalCheckSeconds = 0.1;

// Waits without the GIL, waking every kSignalCheckSeconds to let Python run
// signal handlers: Ctrl-C raises KeyboardInterrupt, an alarm-based timeout
// fires. A finished operation wakes the waiter at once; the handle stays valid
// when a handler raises.
Output Wait(Handle h) {
  // Shared: another thread may shut kolo down and init() it again meanwhile.
  std::shared_ptr<Runtime> runtime = State().shared_runtime();
  Runtime& rt = *runtime;
  Output out;
  // An operation that has finished (synchronize() after a step's backward
  // pass, mostly) is taken without letting the GIL go and taking it back.
  std::optional<Status> s = rt.WaitFor(h, 0.0, &out.result);
  while (!s.has_value()) {
    {
      py::gil_scoped_release release;
      s = rt.WaitFor(h, kSignalCheckSeconds, &out.result);
    }
    if (!s.has_value() && PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  if (!s->ok()) Raise(*s);
  return out;
}

}  // namespace

Runtime* RunningRuntime() { return State().runtime_or_null(); }

}  // namespace kolo

// Long, and left so: it is the module's table of contents, one short m.def
// per entry point; the work is in the functions above.
PYBIND11_MODULE(_core, m) {
  using namespace kolo;
  m.doc() = "kolo's framework-neutral core (use kolo.torch or kolo.numpy)";
  State().set_internal_error(
      py::exception<std::runtime_error>(m, "KoloInternalError", PyExc_RuntimeError));

  // The codes of kolo::DataType and kolo::ReduceOp, by name, for the Python modules.
  py::dict dtypes, ops;
  for (int i = 0; i < kNumDataTypes; ++i) dtypes[DataTypeName(static_cast<DataType>(i))] = i;
  for (int i = 0; i < kNumReduceOps; ++i) {
    ops[ReduceOpName(static_cast<ReduceOp>(i))] = i;
  }
  m.attr("DTYPES") = dtypes;
  m.attr("REDUCE_OPS") = ops;
  // How the entries that take a framework's tensors read them (tensor_reader.cc).
  RegisterTensorReader(m);

  m.def(
      "init",
      [](std::vector<std::vector<int>> process_sets, uintptr_t comm_handle,
         std::vector<int> world_ranks) {
        InitOptions options;
        options.process_sets = std::move(process_sets);
        // An mpi4py communicator's handle (MPI._handleof(comm)): an Open MPI MPI_Comm.
        if (comm_handle != 0) options.comm = reinterpret_cast<MPI_Comm>(comm_handle);
        options.world_ranks = std::move(world_ranks);  // init(comm=[ranks])
        State().Init(options);
      },
      py::arg("process_sets") = std::vector<std::vector<int>>(), py::arg("comm_handle") = 0,
      py::arg("world_ranks") = std::vector<int>());
  m.def("shutdown", [] { State().Shutdown(); });
  m.def("is_initialized", [] { return State().running(); });
  m.def("rank", [] { return Rt().rank(); });
  m.def("size", [] { return Rt().size(); });
  m.def("local_rank", [] { return Rt().local_rank(); });
  m.def("local_size", [] { return Rt().local_size(); });
  m.def("cross_rank", [] { return Rt().cross_rank(); });
  m.def("cross_size", [] { return Rt().cross_size(); });
  m.def("mpi_threads_supported", [] { return Rt().mpi_threads_supported(); });
  m.def("is_homogeneous", [] { return Rt().is_homogeneous(); });

  m.def("allreduce_async", [](uintptr_t in, uintptr_t out, int dtype, std::vector<int64_t> shape,
                              int device, const std::string& name, int op, double prescale,
                              double postscale, int process_set, uintptr_t stream) {
    return Enqueued(Rt().EnqueueAllreduce(
        View(in, dtype, shape, device), View(out, dtype, shape, device),
        Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set, stream)));
  });
  m.def("allgather_async", [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device,
                              const std::string& name, int process_set, uintptr_t stream) {
    return Enqueued(
        Rt().EnqueueAllgather(View(in, dtype, shape, device), Named(name, process_set, stream)));
  });
  m.def("broadcast_async",
        [](uintptr_t ptr, int dtype, std::vector<int64_t> shape, int device, int root,
           const std::string& name, int process_set, uintptr_t stream) {
          return Enqueued(Rt().EnqueueBroadcast(View(ptr, dtype, shape, device), root,
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
          return Enqueued(Rt().EnqueueGroupedAllreduce(
              in, out,
              Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set, stream)));
        });
  // The same two, reading the framework's tensors here (tensor_reader.h): one
  // call per operation, however many tensors. `output` / `outputs`: None to
  // reduce in place, else tensors of the inputs' shapes and dtypes; `what`
  // names the inputs in a refusal ("allreduce input"); `caller_waits`: a
  // blocking call, whose caller runs the round (CollectiveOptions::caller_waits).
  m.def("allreduce_tensor_async",
        [](const TensorReader& reader, py::handle tensor, py::handle output, const char* what,
           const std::string& name, int op, double prescale, double postscale, int process_set,
           bool caller_waits) {
          TensorView in = reader.Read(tensor, what, -1);
          TensorView out = in;
          if (!output.is_none()) out.data = reinterpret_cast<void*>(reader.DataPtr(output));
          auto options = Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set,
                                                    reader.Stream(tensor, in));
          options.caller_waits = caller_waits;
          return Enqueued(Rt().EnqueueAllreduce(in, out, options));
        });
  m.def("grouped_allreduce_tensors_async",
        [](const TensorReader& reader, py::handle tensors, py::handle outputs, const char* what,
           const std::string& name, int op, double prescale, double postscale, int process_set,
           bool caller_waits) {
          std::vector<TensorView> in = reader.ReadList(tensors, what);
          if (in.empty()) throw py::value_error(std::string(what) + " needs at least one tensor");
          std::vector<TensorView> out;
          if (!outputs.is_none()) {
            out = in;
            py::sequence seq = py::reinterpret_borrow<py::sequence>(outputs);
            if (py::len(seq) != in.size()) throw py::value_error("one output per input needed");
            for (size_t i = 0; i < out.size(); ++i) {
              out[i].data = reinterpret_cast<void*>(reader.DataPtr(seq[i]));
            }
          }
          auto options = Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set,
                                                    reader.FirstStream(tensors, in));
          options.caller_waits = caller_waits;
          return Enqueued(Rt().EnqueueGroupedAllreduce(in, outputs.is_none() ? in : out, options));
        });
  // Grouped allgather / reducescatter: `tensors` are (data, dtype, shape, device);
  // the Output's take_parts() gives the results in order.
  m.def("grouped_allgather_async",
        [](const std::vector<std::tuple<uintptr_t, int, std::vector<int64_t>, int>>& tensors,
           const std::string& name, int process_set, uintptr_t stream) {
          return Enqueued(
              Rt().EnqueueGroupedAllgather(Views(tensors), Named(name, process_set, stream)));
        });
  m.def("grouped_reducescatter_async",
        [](const std::vector<std::tuple<uintptr_t, int, std::vector<int64_t>, int>>& tensors,
           const std::string& name, int op, double prescale, double postscale, int process_set,
           uintptr_t stream) {
          return Enqueued(Rt().EnqueueGroupedReducescatter(
              Views(tensors),
              Reducing<ReducescatterOptions>(name, op, prescale, postscale, process_set, stream)));
        });
  m.def("alltoall_async", [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device,
                             std::vector<int64_t> splits, const std::string& name, int process_set,
                             uintptr_t stream) {
    return Enqueued(Rt().EnqueueAlltoall(View(in, dtype, shape, device), splits,
                                         Named(name, process_set, stream)));
  });
  m.def("reducescatter_async",
        [](uintptr_t in, int dtype, std::vector<int64_t> shape, int device, const std::string& name,
           int op, double prescale, double postscale, int process_set, uintptr_t stream) {
          return Enqueued(Rt().EnqueueReducescatter(
              View(in, dtype, shape, device),
              Reducing<ReducescatterOptions>(name, op, prescale, postscale, process_set, stream)));
        });
  // Join and barrier have fixed names: no call site to look up.
  m.def("join_async", [](int process_set) {
    CollectiveOptions o;
    o.process_set = process_set;
    return Enqueued(Rt().EnqueueJoin(o));
  });
  m.def("barrier_async", [](int process_set) {
    CollectiveOptions o;
    o.process_set = process_set;
    return Enqueued(Rt().EnqueueBarrier(o));
  });
  m.def("add_process_set_async",
        [](std::vector<int> ranks) { return Enqueued(Rt().EnqueueAddProcessSet(ranks)); });
  m.def("remove_process_set_async",
        [](int id) { return Enqueued(Rt().EnqueueRemoveProcessSet(id)); });
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
  m.def(
      "refuse",
      [](const std::string& op, const std::string& name, int process_set, int count,
         const std::string& reason) {
        Runtime* rt = State().runtime_or_null();
        if (rt == nullptr || !rt->is_running()) return;
        rt->AnnounceRefusal(op, count, Named(name, process_set), reason);
      },
      py::arg("op"), py::arg("name"), py::arg("process_set"), py::arg("count"), py::arg("reason"),
      "This rank refused a collective before calling the core (a bad input found in Python): "
      "the other ranks' matching collective fails too, naming this rank and `reason`, instead "
      "of waiting. Never raises.");
  m.def("poll", [](Handle h) { return Rt().Poll(h); });
  m.def("cycle_stats", [] {
    CycleStats c = Rt().cycle_stats();
    py::dict d;
    d["by_background"] = c.by_background;
    d["by_callers"] = c.by_callers;
    d["left_unfinished"] = c.left_unfinished;
    return d;
  });
  m.def(
      "release", [](Handle h) { Rt().Release(h); },
      "Forgets a handle that will not be waited for; its name is free once it completes.");
  m.def("cuda_built", [] { return BuiltWithCuda(); });
  // The stall shutdown time read through the settings table, as the runtime
  // reads it (the KOLO_ name or its HOROVOD_ alias; 0 when stall checks are off).
  m.def("stall_shutdown_seconds", [] {
    Result<LaunchSettings> settings = ReadLaunchSettings();
    return settings.ok() ? settings.value().stall_shutdown_seconds
                         : DefaultLaunchSettings().stall_shutdown_seconds;
  });
  m.def("gpu_count", [] { return GpuCount(); });
  m.def("nccl_version", [] { return NcclVersion(); });
  // The Python line that called an unnamed collective (kolo.jax records it
  // when tracing, for the collectives XLA runs later).
  m.def("call_site", &CallSite);
  // kolo.jax's tree check: every rank's signature text in, the first
  // differing leaf in words out (tree_signature.h).
  m.def("first_difference", &FirstDifference);
#ifdef KOLO_HAVE_XLA_FFI
  // XLA FFI handlers for kolo.jax inside jit (jax.ffi.register_ffi_target).
  m.attr("xla_ffi_handlers") =
      py::dict(py::arg("kolo_allreduce") = py::capsule(JaxAllreduceHandler()));
#endif
  m.def("wait", &Wait, "Blocks (without the GIL) until the operation finishes.");
  // Joining ranks that torchrun or torch.multiprocessing.spawn started, and the
  // torch.distributed backend's point-to-point messages among them (c10d_mpi.cc).
  RegisterC10dMpi(m);

  py::class_<Output>(m, "Output")
      .def_property_readonly("shape", &Output::shape)
      .def_property_readonly("received_splits",
                             [](const Output& o) { return o.result.received_splits; })
      .def_property_readonly("value", [](const Output& o) { return o.result.value; })
      .def_property_readonly("nbytes", &Output::nbytes)
      .def_property_readonly("device", [](const Output& o) { return o.result.device; })
      // A grouped operation's results, moved out (call once); a group of one
      // tensor has its result in the Output itself.
      .def("take_parts",
           [](Output& o) {
             std::vector<Output> parts;
             if (o.result.parts.empty()) parts.push_back({std::move(o.result)});
             for (WorkResult& r : o.result.parts) parts.push_back({std::move(r)});
             o.result.parts.clear();
             return parts;
           })
      .def("copy_to", &Output::CopyTo);
}
