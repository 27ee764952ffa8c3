// What kolo._core keeps between calls (the runtime, whether this process shut
// it down, the KoloInternalError type) and the helpers every entry point
// shares: raising a Status as the right Python error, the runtime to call,
// the call site of an unnamed collective, and waiting without the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kolo/runtime.h"

namespace kolo {

// The module's one instance, State(), lives as long as the process (CPython
// never unloads an extension module); every call reaches it holding the GIL,
// which serializes them, except where a call lets the GIL go: shutdown()
// (while the background thread ends) and waits. So init() and shutdown() also
// take `lifecycle_`, and the runtime is shared with the calls that wait
// without the GIL: two Python threads that call init() and shutdown() at once
// run one after the other, and a runtime that init() replaces lives until its
// last waiter returns.
class ModuleState {
 public:
  bool running() const { return runtime_ && runtime_->is_running(); }
  // The runtime unless this process has not made it or shut it down; no GIL
  // needed (for threads that XLA runs).
  Runtime* runtime_or_null() const { return shut_down_here_ ? nullptr : runtime_.get(); }

  // Makes the runtime, unless one is running (like Horovod's, init() is
  // idempotent). False, with no runtime, in a process that kolo started to
  // grow a job in place when that job ended before it joined: it is not needed.
  bool Init(const InitOptions& options);
  // Marks the runtime shut down here, then shuts it down without the GIL.
  void Shutdown();
  // After a lost rank, under fault tolerance: the runtime stopped and
  // replaced by one on the survivors (Runtime::ShrinkAfterFailure), with the
  // global process set only. Collective over the survivors. False when not
  // every living rank joined within the patience (30 s: one is stuck in its
  // own code); the process must then leave. Raises when the shrink failed.
  bool ShrinkInPlace();
  // Growing in place (Runtime::StartReplacements, GrowInPlace): the
  // runtime replaced by one on this job's ranks and the new processes, with
  // the global process set only. Collective over both. False when it did not
  // end within the patience (30 s: a new process died after its MPI_Init,
  // and the merge waits for it); the process must then leave. Raises when it
  // failed.
  bool GrowInPlace();
  // Rank 0 at the end of the training (Runtime::ReleaseReplacements), without
  // the GIL: "" when the new processes still starting were told to end, or
  // none were starting; else why not.
  std::string ReleaseReplacements(std::chrono::milliseconds patience);

  // The runtime, for queries and enqueues; raises when kolo is not
  // initialized or this process shut it down. After another rank's shutdown
  // it stays valid: queries answer and enqueues fail with the reason.
  Runtime& runtime();
  // The same, shared: for a call that lets the GIL go while it uses it.
  std::shared_ptr<Runtime> shared_runtime() {
    runtime();  // raises when there is none
    return runtime_;
  }

  // A Status as ValueError (a bad argument on this rank), NotImplementedError
  // (a collective refused where Horovod refuses it as not implemented:
  // Adasum's process sets and sizes) or KoloInternalError (anything else: a
  // failed collective, with the coordinator's text, or kolo not running).
  // `enqueue`: the error of an Enqueue* call, which announced a refusal
  // itself; the exception says so (its `_kolo_core` attribute), so that the
  // Python side does not announce it again.
  [[noreturn]] void Raise(const Status& s, bool enqueue = false) const;
  // Holds the KoloInternalError type for good: Python may be finalized
  // before this object is destroyed, so the reference is never released.
  void set_internal_error(pybind11::object type) { internal_error_ = type.release().ptr(); }

  // Directories whose frames are not the user's: kolo's package and the
  // frameworks it wraps (their autograd machinery calls kolo's functions).
  // Looked up on first use, once the frameworks are imported.
  const std::vector<std::string>& InternalDirs();

  // What CallSite needs of a code object, found on its first call and kept
  // (a collective's call site is read on every unnamed call): whether it is
  // kolo's or a framework's (InternalDirs), its file's base name and its
  // function's name. The entry holds a reference to the code, so its address
  // stays its key; dropped only when the cache starts afresh, never at exit
  // (Python may be finalized first, as for `internal_error_`).
  struct CodeSite {
    PyObject* code = nullptr;
    bool internal = false;
    std::string file;      // "train.py:"
    std::string function;  // " in step"
  };
  const CodeSite& SiteOf(PyObject* code);

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
  std::unordered_map<PyObject*, CodeSite> code_sites_;  // with the GIL held
};

ModuleState& State();

// State().Raise(s), for a call that is not an enqueue.
[[noreturn]] void Raise(const Status& s);

// The runtime, for queries and enqueues (see ModuleState::runtime).
inline Runtime& Rt() { return State().runtime(); }

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// The handle of an Enqueue* call, or its error (see ModuleState::Raise).
Handle Enqueued(Result<Handle> r);

// Where the Python code that called an unnamed collective is ("train.py:57 in
// step"): the innermost frame outside kolo and the frameworks. Ranks that pair
// an unnamed collective from different places and disagree are out of step.
std::string CallSite();

// What a finished operation produced, for the Python side to copy out.
struct Output {
  WorkResult result;
  pybind11::tuple shape() const;
  size_t nbytes() const;
  // `ptr`: host memory, or device memory on the result's device.
  void CopyTo(uintptr_t ptr, size_t bytes) const;
};

// Waits without the GIL, waking now and then to let Python run signal
// handlers: Ctrl-C raises KeyboardInterrupt, an alarm-based timeout fires. A
// finished operation wakes the waiter at once; the handle stays valid when a
// handler raises.
Output Wait(Handle h);

// An Enqueue* call's result for Python: its handle (an int), or, when the
// caller `waits`, the finished operation's Output, waited for in the same
// binding call (a blocking form: one call that starts and waits). A wait that
// a signal interrupts releases the operation, whose handle nobody holds.
pybind11::object Started(Result<Handle> r, bool waits);

// The running runtime or null, without the GIL (XLA's threads; jax_ffi.h).
Runtime* RunningRuntime();

}  // namespace kolo
