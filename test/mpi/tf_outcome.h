// What the TensorFlow op library's C table (bindings/tensorflow/kolo_tf_abi.h)
// reports for one operation, kept past the report: the tests start operations
// as the op library does and wait for the outcome with a deadline.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/types.h"
#include "tensorflow/kolo_tf_abi.h"

namespace kolo::test {

struct TfResultCopy {
  int32_t device = KOLO_TF_HOST;
  std::vector<uint8_t> bytes;  // read back to host memory
  std::vector<int64_t> shape, received_splits;
};

// A request as the op library makes one: summing, no scale factors, no call
// site; the tests set what else they need.
inline KoloTfRequest TfRequest(int32_t kind, const char* name, bool caller_waits = false) {
  KoloTfRequest r{};
  r.kind = kind;
  r.name = name;
  r.call_site = "";
  r.reduce_op = static_cast<int32_t>(ReduceOp::kSum);
  r.prescale = 1;
  r.postscale = 1;
  r.caller_waits = caller_waits ? 1 : 0;
  return r;
}

class TfOutcome {
 public:
  // Reads a device result into host memory (the GPU tests give one); host
  // results are copied as they are.
  using DeviceReader = std::function<void(const KoloTfResult&, std::vector<uint8_t>*)>;
  explicit TfOutcome(DeviceReader reader = nullptr) : reader_(std::move(reader)) {}

  // The KoloTfDone to hand start(), with `this` as its context.
  static void Done(void* context, const KoloTfOutcome* o) {
    static_cast<TfOutcome*>(context)->Take(*o);
  }

  // Waits for the report; false (and a test failure) after `seconds`.
  bool Wait(double seconds = 60) {
    std::unique_lock<std::mutex> lock(mu_);
    bool done = cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                             [this] { return reported_ > 0; });
    EXPECT_TRUE(done) << "the operation did not report within " << seconds << " s";
    return done;
  }

  int reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reported_;
  }
  int32_t code = -1;
  std::string message;
  int32_t value = -1;
  std::vector<TfResultCopy> results;

 private:
  void Take(const KoloTfOutcome& o) {
    std::vector<TfResultCopy> copies;
    for (int32_t i = 0; i < o.num_results; ++i) {
      const KoloTfResult& r = o.results[i];
      TfResultCopy c;
      c.device = r.device;
      c.shape.assign(r.shape, r.shape + r.ndim);
      c.received_splits.assign(r.received_splits, r.received_splits + r.num_received_splits);
      if (r.device == KOLO_TF_HOST) {
        c.bytes.resize(r.bytes);
        if (r.bytes > 0) std::memcpy(c.bytes.data(), r.data, r.bytes);
      } else if (reader_) {
        reader_(r, &c.bytes);
      }
      copies.push_back(std::move(c));
    }
    const int32_t code_now = o.code;
    std::string message_now = o.message;
    const int32_t value_now = o.value;
    o.release(o.keep);
    // Notified under the lock: the waiter may destroy this object as soon as it
    // sees the report, so nothing of it is touched after the lock is released.
    std::lock_guard<std::mutex> lock(mu_);
    code = code_now;
    message = std::move(message_now);
    value = value_now;
    results = std::move(copies);
    ++reported_;
    cv_.notify_all();
  }

  DeviceReader reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  int reported_ = 0;
};

// An allgather of int64 rows, `cols` wide, where rank r sent r + 1 rows of
// `first_value + r`: the result's shape, size and every value, in rank order.
inline void ExpectGatheredRows(const TfResultCopy& r, int size, int64_t cols, int64_t first_value,
                               int rank) {
  const int64_t all_rows = size * (size + 1) / 2;
  ASSERT_EQ(r.shape, (std::vector<int64_t>{all_rows, cols}));
  ASSERT_EQ(r.bytes.size(), static_cast<size_t>(all_rows * cols) * sizeof(int64_t));
  std::vector<int64_t> got(all_rows * cols);
  std::memcpy(got.data(), r.bytes.data(), r.bytes.size());
  size_t at = 0;
  for (int from = 0; from < size; ++from) {
    for (int64_t i = 0; i < (from + 1) * cols; ++i, ++at) {
      ASSERT_EQ(got[at], first_value + from) << "rank " << rank << " elem " << at;
    }
  }
}

}  // namespace kolo::test
