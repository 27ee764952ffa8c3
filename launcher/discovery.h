// The host discovery script (--host-discovery-script), run as a child
// process without a shell, its output read without blocking: kolorun keeps
// forwarding the job's output while the script runs, and a script that
// hangs is killed after kDiscoveryTimeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"
#include "kolo/status.h"

namespace kolo::launcher {

// How long one run of the script may take.
constexpr double kDiscoveryTimeoutSeconds = 30;

class DiscoveryScript {
 public:
  DiscoveryScript(std::string path, int default_slots)
      : path_(std::move(path)), default_slots_(default_slots) {}
  ~DiscoveryScript();
  DiscoveryScript(const DiscoveryScript&) = delete;
  DiscoveryScript& operator=(const DiscoveryScript&) = delete;

  // Starts a run unless one is running. Non-blocking.
  void Start();
  // Reads what the running script wrote, without blocking; returns the
  // result once it has ended (or was killed, or could not start), else
  // nothing (also when no run was started).
  std::optional<Result<std::vector<HostSlots>>> Poll();
  // Runs the script to its end (the first run, and while no job runs).
  Result<std::vector<HostSlots>> RunNow();
  const std::string& path() const { return path_; }

 private:
  Result<std::vector<HostSlots>> Finish(int wait_status);
  void Kill();

  const std::string path_;
  const int default_slots_;
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  std::string stdout_, stderr_;
  std::chrono::steady_clock::time_point started_;
  bool timed_out_ = false;
  std::string start_error_;  // why the last Start() failed, until Poll() reports it
};

}  // namespace kolo::launcher
