// Sends this rank's counters (Metrics) to kolorun once a second, as one
// RankSnapshot line per connection to its rendezvous server
// (KOLO_MONITOR_REPORT). A thread of its own, so that a slow or gone kolorun
// never holds a collective: each send has a deadline of one second, and the
// reporter stops (with one log line) when kolorun refuses it.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "metrics.h"

namespace kolo {

class MetricsReporter {
 public:
  // Starts reporting `metrics` (which must outlive the reporter) to `target`
  // ("token@address:port"); nullptr when `target` is empty.
  static std::unique_ptr<MetricsReporter> Start(const std::string& target, int rank,
                                                const Metrics* metrics);
  ~MetricsReporter();  // sends a last snapshot, then stops
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

 private:
  MetricsReporter(std::string token, std::string address, int port, int rank,
                  const Metrics* metrics);
  void Loop();
  // One snapshot; false when kolorun refused it (a wrong token, a bad line).
  bool SendOnce();

  const std::string token_, address_, host_;
  const int port_, rank_;
  const Metrics* metrics_;
  Mutex mutex_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace kolo
