// What the launcher (kolorun, kolo-rank) reads of kolo's settings, read by the
// runtime's own settings table (runtime/config_table.cc, in kolo_core and
// libkolo), so that a variable means the same to the launcher as to the ranks
// and no second table or parser exists. The names the launcher sets are in
// kolo/env_names.h.
#pragma once

#include <string>

#include "kolo/status.h"

namespace kolo {

struct LaunchSettings {
  // KOLO_PYTHON: the interpreter `kolorun --check-build` asks.
  std::string python;
  bool python_given = false;  // set in the environment (else `python` is the default)
  // How long a rank's command may stay stopped (SIGSTOP) before kolo-rank
  // ends it: KOLO_STALL_SHUTDOWN_TIME_SECONDS, 0 when stall checks are off
  // (KOLO_STALL_CHECK_DISABLE).
  double stall_shutdown_seconds = 0;
  // Elastic mode: how long kolorun waits for enough slots
  // (KOLO_ELASTIC_TIMEOUT or HOROVOD_ELASTIC_TIMEOUT; --elastic-timeout wins).
  double elastic_timeout_seconds = 600;
  // KOLO_TF_OPS: kolo.tensorflow runs its collectives as TensorFlow ops.
  bool tf_ops = true;
};

// From this process's KOLO_* variables and their HOROVOD_* aliases (the
// KOLO_ name wins). A bad value fails naming the variable and the value.
Result<LaunchSettings> ReadLaunchSettings();
// Every setting at its default, no variable read.
LaunchSettings DefaultLaunchSettings();

}  // namespace kolo
