// NCCL, loaded when the GPU path first needs it instead of linked.
//
// Why: NCCL's soname is libnccl.so.2 whatever its minor version, and the
// dynamic linker reuses a library already loaded under that name. Linked into
// libkolo, the NCCL kolo is built against (say 2.28) would be loaded by
// `import kolo` and then serve PyTorch's libtorch_cuda.so, which needs its own
// newer one (2.30: "undefined symbol: ncclCommResume"), so `import torch`
// would fail in any process that imported a kolo binding first. Loaded lazily,
// kolo takes the libnccl.so.2 already in the process (the framework's, which
// is at least as new as kolo needs in practice), else the one found by the
// dynamic linker, else the one it was built against. A CPU-only job never
// loads NCCL at all.
#pragma once

#include <nccl.h>

#include <string>

#include "kolo/status.h"

namespace kolo {

// Every NCCL function kolo calls, as (member, NCCL symbol).
#define KOLO_NCCL_FUNCTIONS(X)                \
  X(GetVersion, ncclGetVersion)               \
  X(GetUniqueId, ncclGetUniqueId)             \
  X(CommInitRank, ncclCommInitRank)           \
  X(CommFinalize, ncclCommFinalize)           \
  X(CommDestroy, ncclCommDestroy)             \
  X(CommAbort, ncclCommAbort)                 \
  X(CommGetAsyncError, ncclCommGetAsyncError) \
  X(GetErrorString, ncclGetErrorString)       \
  X(GetLastError, ncclGetLastError)           \
  X(AllReduce, ncclAllReduce)                 \
  X(Broadcast, ncclBroadcast)                 \
  X(Reduce, ncclReduce)                       \
  X(AllGather, ncclAllGather)                 \
  X(ReduceScatter, ncclReduceScatter)         \
  X(Send, ncclSend)                           \
  X(Recv, ncclRecv)                           \
  X(GroupStart, ncclGroupStart)               \
  X(GroupEnd, ncclGroupEnd)

struct NcclApi {
#define KOLO_NCCL_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  KOLO_NCCL_FUNCTIONS(KOLO_NCCL_MEMBER)
#undef KOLO_NCCL_MEMBER
  std::string path;  // the file the functions come from
  int version = 0;   // its ncclGetVersion code
};

// Loads NCCL once (thread-safe) and returns its functions, or why it could
// not: no library found, or one without a function kolo calls (older than
// the NCCL_VERSION_CODE kolo was built against allows).
Result<const NcclApi*> LoadNccl();

// The loaded functions. Only after LoadNccl() succeeded: every NCCL call
// needs a communicator, and communicators are made after loading.
const NcclApi& Nccl();

}  // namespace kolo
