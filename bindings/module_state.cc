// kolo._core's state between calls and the helpers its entry points share
// (module_state.h).
#include "module_state.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

namespace py = pybind11;

namespace kolo {

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

bool ModuleState::Init(const InitOptions& options) {
  std::unique_lock<std::mutex> lock = LockLifecycle();
  if (running()) return true;
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
  if (!created.ok() && created.status().code() == StatusCode::kAborted) return false;
  if (!created.ok()) Raise(created.status());
  runtime_ = std::move(created).value();
  shut_down_here_ = false;
  return true;
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

namespace {
// How long ShrinkInPlace waits for the other survivors (kolorun waits as long
// for their SHRUNK, launcher/elastic.cc).
constexpr std::chrono::seconds kShrinkPatience{30};
}  // namespace

bool ModuleState::ShrinkInPlace() {
  std::unique_lock<std::mutex> lock = LockLifecycle();
  if (!runtime_ || shut_down_here_) {
    Raise(Status::PreconditionFailed("kolo is not running here: nothing to shrink"));
  }
  Status failed;
  std::unique_ptr<Runtime> created;
  {
    py::gil_scoped_release release;
    // The shrink waits for every living rank: one alive but not answering
    // (stuck in its own code) would hold the others forever. Past the
    // patience the shrink is left to its thread, and this process to leave.
    auto resuming = std::make_shared<std::promise<Result<std::unique_ptr<Runtime>>>>();
    std::future<Result<std::unique_ptr<Runtime>>> done = resuming->get_future();
    std::thread([old = runtime_, resuming] {
      resuming->set_value(old->ResumeOnSurvivors());
    }).detach();
    if (done.wait_for(kShrinkPatience) != std::future_status::ready) return false;
    Result<std::unique_ptr<Runtime>> resumed = done.get();
    if (resumed.ok()) {
      created = std::move(resumed).value();
    } else {
      failed = resumed.status();
    }
  }
  if (!created) Raise(failed);
  runtime_ = std::move(created);
  shut_down_here_ = false;
  return true;
}

bool ModuleState::GrowInPlace() {
  std::unique_lock<std::mutex> lock = LockLifecycle();
  if (!runtime_ || shut_down_here_) {
    Raise(Status::PreconditionFailed("kolo is not running here: nothing to grow"));
  }
  Status failed;
  std::unique_ptr<Runtime> created;
  {
    py::gil_scoped_release release;
    // As ShrinkInPlace: the merge waits for every new process, and one that
    // died after its MPI_Init is not noticed there.
    auto growing = std::make_shared<std::promise<Result<std::unique_ptr<Runtime>>>>();
    std::future<Result<std::unique_ptr<Runtime>>> done = growing->get_future();
    std::thread([old = runtime_, growing] { growing->set_value(old->GrowInPlace()); }).detach();
    if (done.wait_for(kShrinkPatience) != std::future_status::ready) return false;
    Result<std::unique_ptr<Runtime>> grown = done.get();
    if (grown.ok()) {
      created = std::move(grown).value();
    } else {
      failed = grown.status();
    }
  }
  if (!created) Raise(failed);
  runtime_ = std::move(created);
  shut_down_here_ = false;
  return true;
}

std::string ModuleState::ReleaseReplacements(std::chrono::milliseconds patience) {
  std::unique_lock<std::mutex> lock = LockLifecycle();
  if (!runtime_) return "";
  py::gil_scoped_release release;
  Status released = runtime_->ReleaseReplacements(patience);
  return released.ok() ? std::string() : released.message();
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

void Raise(const Status& s) { State().Raise(s); }

Handle Enqueued(Result<Handle> r) {
  if (!r.ok()) State().Raise(r.status(), /*enqueue=*/true);
  return r.value();
}

namespace {
// Code objects CallSite keeps; past this many (code made at run time) it
// starts afresh.
constexpr size_t kMaxCodeSites = 4096;
}  // namespace

const ModuleState::CodeSite& ModuleState::SiteOf(PyObject* code) {
  auto known = code_sites_.find(code);
  if (known != code_sites_.end()) return known->second;
  if (code_sites_.size() >= kMaxCodeSites) {
    for (auto& known_site : code_sites_) Py_DECREF(known_site.second.code);
    code_sites_.clear();
  }
  const std::vector<std::string>& internal = InternalDirs();
  py::handle c(code);
  CodeSite site;
  std::string file = py::str(c.attr("co_filename")).cast<std::string>();
  site.internal = std::any_of(internal.begin(), internal.end(), [&](const std::string& dir) {
    return file.compare(0, dir.size(), dir) == 0;
  });
  site.file = file.substr(file.find_last_of('/') + 1) + ":";
  site.function = " in " + py::str(c.attr("co_name")).cast<std::string>();
  site.code = c.inc_ref().ptr();
  return code_sites_.emplace(code, std::move(site)).first->second;
}

std::string CallSite() {
  ModuleState& state = State();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string site;
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference; the cache holds its own
    const ModuleState::CodeSite& s = state.SiteOf(reinterpret_cast<PyObject*>(code));
    Py_DECREF(code);
    if (!s.internal) {
      site = s.file + std::to_string(PyFrame_GetLineNumber(frame)) + s.function;
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

py::tuple Output::shape() const { return py::cast(result.shape); }

size_t Output::nbytes() const {
  if (result.device == kCpuDevice) return result.data.size();
  size_t n = DataTypeSize(result.dtype);
  for (int64_t d : result.shape) n *= static_cast<size_t>(d);
  return n;
}

void Output::CopyTo(uintptr_t ptr, size_t bytes) const {
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

// How long a waiting thread sleeps between looks at Python's signals.
constexpr double kSignalCheckSeconds = 0.1;

namespace {

// Wait's loop; `look_first`: take an operation that has finished already
// without letting the GIL go and taking it back (synchronize() after a step's
// backward pass, mostly), which one just started has not.
Output WaitOutput(Handle h, bool look_first) {
  // Shared: another thread may shut kolo down and init() it again meanwhile.
  std::shared_ptr<Runtime> runtime = State().shared_runtime();
  Runtime& rt = *runtime;
  Output out;
  std::optional<Status> s;
  if (look_first) s = rt.WaitFor(h, 0.0, &out.result);
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

Output Wait(Handle h) { return WaitOutput(h, /*look_first=*/true); }

py::object Started(Result<Handle> r, bool waits) {
  const Handle h = Enqueued(std::move(r));
  if (!waits) return py::int_(h);
  // Finished with its error: released already. Interrupted: nobody else holds
  // the handle. Either way the core has had the operation, so what the wait
  // raises is marked as the core's (`_kolo_core`): refusals.py announces only
  // what a rank refused before the core had it, and an announcement here
  // would take an unnamed collective's number a second time.
  const auto release = [h] {
    if (Runtime* rt = RunningRuntime()) rt->Release(h);
  };
  try {
    return py::cast(WaitOutput(h, /*look_first=*/false));
  } catch (py::error_already_set& e) {
    release();
    if (PyObject_SetAttrString(e.value().ptr(), "_kolo_core", Py_True) != 0) PyErr_Clear();
    throw;
  } catch (py::value_error& e) {
    release();
    py::object error = py::reinterpret_borrow<py::object>(PyExc_ValueError)(e.what());
    error.attr("_kolo_core") = true;
    PyErr_SetObject(PyExc_ValueError, error.ptr());
    throw py::error_already_set();
  } catch (...) {
    release();
    throw;
  }
}

Runtime* RunningRuntime() { return State().runtime_or_null(); }

}  // namespace kolo
