// The collectives of kolo._core: every one takes a reader (tensor_reader.h)
// and the framework's tensors themselves, so that a tensor enters the core
// one way only, checked in one place. The options they share:
//  - `what` names the inputs in a refusal ("allreduce input");
//  - `name`: empty leaves the name to the core, which records the Python call
//    site for its errors;
//  - `waits`: a blocking call: the core is told the caller waits at once
//    (CollectiveOptions::caller_waits: it wakes no background thread and the
//    waiting thread runs the round), the call waits, and it returns the Output
//    instead of the handle (module_state.h, Started): one binding call;
//  - a device tensor's CUDA stream comes from the reader.
#include "collective_entries.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "module_state.h"
#include "tensor_reader.h"

namespace py = pybind11;

namespace kolo {
namespace {

template <typename Options = CollectiveOptions>
Options Named(const std::string& name, int process_set, uintptr_t stream, bool caller_waits) {
  Options o;
  o.name = name;
  if (name.empty()) o.call_site = CallSite();
  o.process_set = process_set;
  o.cuda_stream = reinterpret_cast<void*>(stream);
  o.caller_waits = caller_waits;
  return o;
}

// Options of a reducing collective (AllreduceOptions, ReducescatterOptions).
template <typename Options>
Options Reducing(const std::string& name, int op, double prescale, double postscale,
                 int process_set, uintptr_t stream, bool caller_waits) {
  if (op < 0 || op >= kNumReduceOps) {
    throw py::value_error("unknown reduce op code " + std::to_string(op));
  }
  Options o = Named<Options>(name, process_set, stream, caller_waits);
  o.op = static_cast<ReduceOp>(op);
  o.prescale_factor = prescale;
  o.postscale_factor = postscale;
  return o;
}

// The inputs of a grouped call, read; a group needs at least one tensor.
std::vector<TensorView> ReadGroup(const TensorReader& reader, py::handle tensors,
                                  const char* what) {
  std::vector<TensorView> in = reader.ReadList(tensors, what);
  if (in.empty()) throw py::value_error(std::string(what) + " needs at least one tensor");
  return in;
}

py::object Allreduce(const TensorReader& reader, py::handle tensor, py::handle output,
                     const char* what, const std::string& name, int op, double prescale,
                     double postscale, int process_set, bool waits) {
  TensorView in = reader.Read(tensor, what, -1);
  TensorView out = in;
  if (!output.is_none()) out.data = reader.Data(output);
  return Started(
      Rt().EnqueueAllreduce(in, out,
                            Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set,
                                                       reader.Stream(tensor, in), waits)),
      waits);
}

py::object GroupedAllreduce(const TensorReader& reader, py::handle tensors, py::handle outputs,
                            const char* what, const std::string& name, int op, double prescale,
                            double postscale, int process_set, bool waits) {
  std::vector<TensorView> in = ReadGroup(reader, tensors, what);
  // In place: the inputs are the outputs (no copy of the views).
  std::vector<TensorView> out;
  if (!outputs.is_none()) out = reader.ReadOutputs(outputs, in);
  return Started(Rt().EnqueueGroupedAllreduce(
                     in, outputs.is_none() ? in : out,
                     Reducing<AllreduceOptions>(name, op, prescale, postscale, process_set,
                                                reader.FirstStream(tensors, in), waits)),
                 waits);
}

py::object Allgather(const TensorReader& reader, py::handle tensor, const char* what,
                     const std::string& name, int process_set, bool waits) {
  TensorView in = reader.Read(tensor, what, -1);
  return Started(
      Rt().EnqueueAllgather(in, Named(name, process_set, reader.Stream(tensor, in), waits)), waits);
}

py::object GroupedAllgather(const TensorReader& reader, py::handle tensors, const char* what,
                            const std::string& name, int process_set, bool waits) {
  std::vector<TensorView> in = ReadGroup(reader, tensors, what);
  return Started(Rt().EnqueueGroupedAllgather(
                     in, Named(name, process_set, reader.FirstStream(tensors, in), waits)),
                 waits);
}

// In place; `root` is the root's rank within the set.
py::object Broadcast(const TensorReader& reader, py::handle tensor, const char* what, int root,
                     const std::string& name, int process_set, bool waits) {
  TensorView in = reader.Read(tensor, what, -1);
  return Started(
      Rt().EnqueueBroadcast(in, root, Named(name, process_set, reader.Stream(tensor, in), waits)),
      waits);
}

// `splits`: rows for each rank of the set (empty: an even split).
py::object Alltoall(const TensorReader& reader, py::handle tensor, const char* what,
                    const std::vector<int64_t>& splits, const std::string& name, int process_set,
                    bool waits) {
  TensorView in = reader.Read(tensor, what, -1);
  return Started(
      Rt().EnqueueAlltoall(in, splits, Named(name, process_set, reader.Stream(tensor, in), waits)),
      waits);
}

py::object Reducescatter(const TensorReader& reader, py::handle tensor, const char* what,
                         const std::string& name, int op, double prescale, double postscale,
                         int process_set, bool waits) {
  TensorView in = reader.Read(tensor, what, -1);
  return Started(Rt().EnqueueReducescatter(
                     in, Reducing<ReducescatterOptions>(name, op, prescale, postscale, process_set,
                                                        reader.Stream(tensor, in), waits)),
                 waits);
}

py::object GroupedReducescatter(const TensorReader& reader, py::handle tensors, const char* what,
                                const std::string& name, int op, double prescale, double postscale,
                                int process_set, bool waits) {
  std::vector<TensorView> in = ReadGroup(reader, tensors, what);
  return Started(Rt().EnqueueGroupedReducescatter(
                     in, Reducing<ReducescatterOptions>(name, op, prescale, postscale, process_set,
                                                        reader.FirstStream(tensors, in), waits)),
                 waits);
}

}  // namespace

void RegisterCollectives(py::module_& m) {
  // `waits`: the call also waits for the operation, the caller running the
  // round (CollectiveOptions::caller_waits), and returns its Output instead of
  // a handle: a blocking form in one binding call.
  const auto waits = py::arg("waits") = false;
  // `output` / `outputs`: None to reduce in place, else tensors like the inputs.
  m.def("allreduce_async", &Allreduce, py::arg("reader"), py::arg("tensor"), py::arg("output"),
        py::arg("what"), py::arg("name"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
        py::arg("process_set"), waits);
  m.def("grouped_allreduce_async", &GroupedAllreduce, py::arg("reader"), py::arg("tensors"),
        py::arg("outputs"), py::arg("what"), py::arg("name"), py::arg("op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("process_set"), waits);
  // The gathering ones: the Output's take_parts() gives a group's results in order.
  m.def("allgather_async", &Allgather, py::arg("reader"), py::arg("tensor"), py::arg("what"),
        py::arg("name"), py::arg("process_set"), waits);
  m.def("grouped_allgather_async", &GroupedAllgather, py::arg("reader"), py::arg("tensors"),
        py::arg("what"), py::arg("name"), py::arg("process_set"), waits);
  m.def("broadcast_async", &Broadcast, py::arg("reader"), py::arg("tensor"), py::arg("what"),
        py::arg("root"), py::arg("name"), py::arg("process_set"), waits);
  m.def("alltoall_async", &Alltoall, py::arg("reader"), py::arg("tensor"), py::arg("what"),
        py::arg("splits"), py::arg("name"), py::arg("process_set"), waits);
  m.def("reducescatter_async", &Reducescatter, py::arg("reader"), py::arg("tensor"),
        py::arg("what"), py::arg("name"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
        py::arg("process_set"), waits);
  m.def("grouped_reducescatter_async", &GroupedReducescatter, py::arg("reader"), py::arg("tensors"),
        py::arg("what"), py::arg("name"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
        py::arg("process_set"), waits);

  // Join and barrier carry no tensors and have fixed names: no call site.
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
  m.def(
      "refuse",
      [](const std::string& op, const std::string& name, int process_set, int count,
         const std::string& reason) {
        Runtime* rt = State().runtime_or_null();
        if (rt == nullptr || !rt->is_running()) return;
        rt->AnnounceRefusal(op, count, Named(name, process_set, 0, false), reason);
      },
      py::arg("op"), py::arg("name"), py::arg("process_set"), py::arg("count"), py::arg("reason"),
      "This rank refused a collective before calling the core (a bad input found in Python): "
      "the other ranks' matching collective fails too, naming this rank and `reason`, instead "
      "of waiting. Never raises.");
}

}  // namespace kolo
