// Objects made once and used again. Take() hands out an idle one, or makes one
// with the pool's `make` when none is idle; the last reference to it gives it
// back (or deletes it, once the pool is gone). The GPU path keeps its CUDA
// events in one pool per device (ops/cuda/nccl_gpu.cc): an event made and
// destroyed per collective costs microseconds, where NCCL's own launch costs
// about one. Re-recording a CUDA event taken back is safe: a stream that
// waits on it waits for the record it saw when it was told to wait.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "kolo/status.h"

namespace kolo {

template <typename T>
class ObjectPool {
 public:
  // Makes a new object in place (a CUDA event: cudaEventCreateWithFlags).
  using Make = std::function<Status(T*)>;

  explicit ObjectPool(Make make) : state_(std::make_shared<State>(std::move(make))) {}
  ObjectPool(const ObjectPool&) = delete;
  ObjectPool& operator=(const ObjectPool&) = delete;

  // Thread-safe: callers' threads and the thread that runs the cycles share a pool.
  Result<std::shared_ptr<T>> Take() {
    std::unique_ptr<T> object;
    {
      MutexLock lock(&state_->mu);
      if (!state_->idle.empty()) {
        object = std::move(state_->idle.back());
        state_->idle.pop_back();
      }
    }
    if (!object) {
      object = std::make_unique<T>();
      KOLO_RETURN_IF_ERROR(state_->make(object.get()));
      MutexLock lock(&state_->mu);
      ++state_->made;
    }
    std::weak_ptr<State> home = state_;
    return std::shared_ptr<T>(object.release(), [home](T* back) {
      std::unique_ptr<T> owned(back);
      if (auto state = home.lock()) {
        MutexLock lock(&state->mu);
        state->idle.push_back(std::move(owned));
      }
    });
  }

  // How many objects are idle, and how many were ever made.
  size_t idle() const {
    MutexLock lock(&state_->mu);
    return state_->idle.size();
  }
  size_t made() const {
    MutexLock lock(&state_->mu);
    return state_->made;
  }

 private:
  // Shared with the deleters of the objects handed out, which may outlive the pool.
  struct State {
    explicit State(Make m) : make(std::move(m)) {}
    const Make make;
    mutable Mutex mu;
    std::vector<std::unique_ptr<T>> idle GUARDED_BY(mu);
    size_t made GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace kolo
