// A mutex and condition variable that clang's -Wthread-safety understands
// (libstdc++'s std::mutex carries no capability annotations).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define KOLO_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KOLO_THREAD_ANNOTATION(x)
#endif

#define GUARDED_BY(x) KOLO_THREAD_ANNOTATION(guarded_by(x))
#define REQUIRES(...) KOLO_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KOLO_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) KOLO_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KOLO_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KOLO_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define CAPABILITY(x) KOLO_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY KOLO_THREAD_ANNOTATION(scoped_lockable)

namespace kolo {

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  // True (and held) if no other thread held it.
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Waits take the mutex they run under, so that the analysis can check that
// the caller holds it.
class CondVar {
 public:
  // Waits with `mu` held (released while waiting). Spurious wakeups possible.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false on timeout.
  bool WaitFor(Mutex* mu, std::chrono::nanoseconds timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace kolo
