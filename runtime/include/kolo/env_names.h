// The environment variables that kolorun sets and the runtime reads: the only
// thing the launcher and the runtime share.
#pragma once

namespace kolo::env {

inline constexpr const char* kFusionThreshold = "KOLO_FUSION_THRESHOLD";
inline constexpr const char* kCycleTime = "KOLO_CYCLE_TIME";
inline constexpr const char* kCacheCapacity = "KOLO_CACHE_CAPACITY";
inline constexpr const char* kTimeline = "KOLO_TIMELINE";
inline constexpr const char* kTimelineMarkCycles = "KOLO_TIMELINE_MARK_CYCLES";
inline constexpr const char* kStallCheckTime = "KOLO_STALL_CHECK_TIME_SECONDS";
inline constexpr const char* kStallShutdownTime = "KOLO_STALL_SHUTDOWN_TIME_SECONDS";
inline constexpr const char* kStallCheckDisable = "KOLO_STALL_CHECK_DISABLE";
inline constexpr const char* kStartTimeout = "KOLO_START_TIMEOUT";
inline constexpr const char* kSshWait = "KOLO_SSH_WAIT";  // read by kolorun (--ssh-wait)
inline constexpr const char* kLogLevel = "KOLO_LOG_LEVEL";
inline constexpr const char* kHierarchicalAllreduce = "KOLO_HIERARCHICAL_ALLREDUCE";
inline constexpr const char* kAsyncCompletion = "KOLO_ENABLE_ASYNC_COMPLETION";
inline constexpr const char* kNcclGroupMinBytes = "KOLO_NCCL_GROUP_MIN_BYTES";
inline constexpr const char* kIdleTick = "KOLO_IDLE_TICK_MS";
inline constexpr const char* kCallerRuns = "KOLO_CALLER_RUNS";
inline constexpr const char* kPieceSize = "KOLO_PIECE_SIZE";
inline constexpr const char* kInPlaceThreshold = "KOLO_IN_PLACE_THRESHOLD";
inline constexpr const char* kShmAllreduce = "KOLO_SHM_ALLREDUCE";
inline constexpr const char* kShmSingleCopy = "KOLO_SHM_SINGLE_COPY";
inline constexpr const char* kShmNegotiation = "KOLO_SHM_NEGOTIATION";
inline constexpr const char* kAutotune = "KOLO_AUTOTUNE";
inline constexpr const char* kAutotuneLog = "KOLO_AUTOTUNE_LOG";
inline constexpr const char* kAutotuneWarmupSamples = "KOLO_AUTOTUNE_WARMUP_SAMPLES";
inline constexpr const char* kAutotuneStepsPerSample = "KOLO_AUTOTUNE_STEPS_PER_SAMPLE";
inline constexpr const char* kAutotuneFile = "KOLO_AUTOTUNE_FILE";
// Elastic mode: set by kolorun for every rank of an elastic job (KOLO_ELASTIC_DIR
// by the user), read by the Python side's commit store; KOLO_ELASTIC_TIMEOUT
// is read by kolorun.
inline constexpr const char* kElastic = "KOLO_ELASTIC";                           // "1"
inline constexpr const char* kElasticJob = "KOLO_ELASTIC_JOB";                    // 32 hex digits
inline constexpr const char* kElasticGeneration = "KOLO_ELASTIC_GENERATION";      // 0, 1, ...
inline constexpr const char* kElasticInPlace = "KOLO_ELASTIC_IN_PLACE";           // "1": ULFM on
inline constexpr const char* kElasticReplacement = "KOLO_ELASTIC_REPLACEMENT";    // "1": joins
inline constexpr const char* kElasticGrowInPlace = "KOLO_ELASTIC_GROW_IN_PLACE";  // "0": restart
inline constexpr const char* kElasticDir = "KOLO_ELASTIC_DIR";          // the commit store's parent
inline constexpr const char* kElasticTimeout = "KOLO_ELASTIC_TIMEOUT";  // --elastic-timeout

// Set by kolorun for its per-rank wrapper (not runtime settings).
inline constexpr const char* kLaunchHosts = "KOLORUN_HOSTS";      // "a:2,b:2", ranks mapped by slot
inline constexpr const char* kRendezvous = "KOLORUN_RENDEZVOUS";  // "address:port" of kolorun
inline constexpr const char* kToken = "KOLORUN_TOKEN";            // the job's random token
inline constexpr const char* kPinGpus = "KOLORUN_PIN_GPUS";       // "1": one GPU per local rank

// Set by kolorun --monitor (or for its status line): where each rank sends its
// counters once a second, "<token>@<address>:<port>" (the rendezvous).
inline constexpr const char* kMonitorReport = "KOLO_MONITOR_REPORT";

}  // namespace kolo::env
