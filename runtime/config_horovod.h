// Horovod's readings of its own variables, one kind of value per function:
// the settings table (config_table.cc) gives each kolo setting that Horovod
// has the reading of its HOROVOD_* name. Horovod's runtime reads its
// variables with strtol / strtof (horovod/common/utils/env_parser.cc,
// operations.cc, parameter_manager.cc, logging.cc): leading spaces are
// skipped, the number the value starts with is read and the rest ignored,
// and a value that starts with no number is 0. These read a value the same
// way, keep it within the kolo setting's bounds, and say when the reading is
// not what the text seems to say (HorovodReading::note).
#pragma once

#include <cstdint>

#include "config.h"

namespace kolo {

// For the settings that Horovod does not have.
HorovodAlias NoHorovodName();
// A value both read alike (a path, or a number only kolorun reads).
HorovodAlias SameReading(const char* name, const char* syntax);
// HOROVOD_FUSION_THRESHOLD: strtol, bytes, 0 to `max_bytes` (a negative
// threshold fuses nothing in Horovod, as 0 does).
HorovodAlias HorovodFusionBytes(const char* name, int64_t max_bytes);
// HOROVOD_CYCLE_TIME: strtof, milliseconds; 0 or less = no pause; at most `max_ms`.
HorovodAlias HorovodCycleMs(const char* name, double max_ms);
// HOROVOD_CACHE_CAPACITY: strtol into Horovod's uint32_t; at most `max_entries`.
HorovodAlias HorovodCacheCapacity(const char* name, int64_t max_entries);
// HOROVOD_STALL_CHECK_TIME_SECONDS: strtol, seconds; 0 or less reads as 0.
HorovodAlias HorovodStallCheckSeconds(const char* name);
// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: strtol, seconds; 0 or less = never.
HorovodAlias HorovodStallShutdownSeconds(const char* name);
// HOROVOD_AUTOTUNE_WARMUP_SAMPLES, ...: strtol, kept within [min, max].
HorovodAlias HorovodCount(const char* name, int64_t min, int64_t max);
// HOROVOD_HIERARCHICAL_ALLREDUCE, ...: strtol(value) > 0 is on.
HorovodAlias HorovodSwitch(const char* name);
// HOROVOD_LOG_LEVEL: TRACE to FATAL in any case, else WARNING; FATAL = error.
HorovodAlias HorovodLogLevel(const char* name);
// HOROVOD_TIMELINE: a path; DYNAMIC = none until start_timeline().
HorovodAlias HorovodTimelinePath(const char* name);
// horovodrun's own variables (HOROVOD_ELASTIC_TIMEOUT): Python's int(), which
// refuses what is not a whole number; kolo refuses it too.
HorovodAlias HorovodrunWholeSeconds(const char* name);

}  // namespace kolo
