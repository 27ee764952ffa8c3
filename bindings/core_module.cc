// kolo._core: the Python module over kolo's C++ Runtime that kolo's Python
// engine (python/kolo/common/engine.py) calls. Nothing here links against a
// framework, so one build serves every PyTorch, TensorFlow and JAX version:
// a tensor enters the core through a reader (tensor_reader.h), by the
// collectives of collective_entries.cc; this file is the module's table of
// contents (lifecycle, topology, waiting, build queries). What the entry
// points share (the runtime, errors, waiting without the GIL, call sites) is
// in module_state.h.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "c10d_mpi.h"
#include "collective_entries.h"
#include "kolo/launch_settings.h"
#include "kolo/runtime.h"
#include "module_state.h"
#include "tensor_reader.h"
#include "tf_abi.h"
#include "tree_signature.h"
#ifdef KOLO_HAVE_XLA_FFI
#include "jax_ffi.h"
#endif

namespace py = pybind11;

// One short m.def per entry point; the work is in the functions of the other
// files.
PYBIND11_MODULE(_core, m) {
  using namespace kolo;
  m.doc() = "kolo's framework-neutral core (use kolo.torch or kolo.numpy)";
  // The MPI ABI of the libkolo this module runs over ("ompi", "mpich" or
  // "mpiabi"; cmake/KoloMpiAbis.cmake), which kolo/_mpi_library.py chose.
  m.attr("MPI_ABI") = MpiAbi();
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
  // How the collectives read a framework's tensors (tensor_reader.cc).
  RegisterTensorReader(m);

  m.def(
      "init",
      [](std::vector<std::vector<int>> process_sets, uintptr_t comm_handle,
         std::vector<int> world_ranks) {
        InitOptions options;
        options.process_sets = std::move(process_sets);
        // An mpi4py communicator's handle (MPI._handleof(comm)), of the job's MPI ABI.
        options.comm = comm_handle;
        options.world_ranks = std::move(world_ranks);  // init(comm=[ranks])
        return State().Init(options);
      },
      py::arg("process_sets") = std::vector<std::vector<int>>(), py::arg("comm_handle") = 0,
      py::arg("world_ranks") = std::vector<int>());
  m.def("shutdown", [] { State().Shutdown(); });
  // Elastic reset in place (kolo.common.elastic, issue 47).
  m.def("shrink_in_place", [] { return State().ShrinkInPlace(); });
  m.def("in_place_unavailable", &InPlaceRecoveryUnavailable);
  // Growing in place (kolo.common.elastic): rank 0 starts the new processes, says where
  // they are ("none", "starting", "ready", or why they failed), and every rank joins them.
  m.def("start_replacements",
        [](const std::string& command, const std::vector<std::string>& args,
           const std::vector<std::string>& hosts, const std::vector<std::string>& environment,
           const std::vector<std::string>& added) {
          Status s = Rt().StartReplacements(command, args, hosts, environment, added);
          if (!s.ok()) Raise(s);
        });
  m.def("replacements", [] {
    std::string why;
    switch (Rt().replacements(&why)) {
      case Runtime::Replacements::kNone:
        return std::string("none");
      case Runtime::Replacements::kStarting:
        return std::string("starting");
      case Runtime::Replacements::kReady:
        return std::string("ready");
      case Runtime::Replacements::kFailed:
        break;
    }
    return why.empty() ? std::string("failed") : why;
  });
  m.def("abandon_replacements", [] { Rt().AbandonReplacements(); });
  m.def("release_replacements", [](double seconds) {
    return State().ReleaseReplacements(
        std::chrono::milliseconds(static_cast<int64_t>(std::max(seconds, 0.0) * 1000)));
  });
  m.def("grow_in_place", [] { return State().GrowInPlace(); });
  m.def("is_initialized", [] { return State().running(); });
  m.def("rank", [] { return Rt().rank(); });
  m.def("size", [] { return Rt().size(); });
  m.def("local_rank", [] { return Rt().local_rank(); });
  m.def("local_size", [] { return Rt().local_size(); });
  m.def("cross_rank", [] { return Rt().cross_rank(); });
  m.def("cross_size", [] { return Rt().cross_size(); });
  m.def("mpi_threads_supported", [] { return Rt().mpi_threads_supported(); });
  m.def("is_homogeneous", [] { return Rt().is_homogeneous(); });

  m.def("process_set_ranks", [](int id) { return Check(Rt().ProcessSetRanks(id)); });
  m.def("process_set_rank", [](int id) { return Check(Rt().ProcessSetRank(id)); });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    Status s = Rt().StartTimeline(path, mark_cycles);
    if (!s.ok()) Raise(s);
  });
  // Training steps for the monitor: a no-op before init (a binding may count
  // a step that runs before kolo starts).
  m.def("count_step", [] {
    if (Runtime* rt = State().runtime_or_null()) rt->CountStep();
  });
  m.def("counters", [] {
    py::dict d;
    for (const auto& [key, value] : Rt().Counters()) d[py::str(key)] = value;
    return d;
  });
  m.def("stop_timeline", [] {
    Status s = Rt().StopTimeline();
    if (!s.ok()) Raise(s);
  });
  // The collectives, each reading the framework's tensors (collective_entries.cc).
  RegisterCollectives(m);
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
  // The C table of kolo's TensorFlow op library (tf_abi.h), as an address, and
  // KOLO_TF_OPS read through the settings table.
  m.def("tf_abi", [] { return reinterpret_cast<uintptr_t>(&TfAbi()); });
  m.def("tf_ops_enabled", [] {
    Result<LaunchSettings> settings = ReadLaunchSettings();
    if (!settings.ok()) Raise(settings.status());
    return settings.value().tf_ops;
  });
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
