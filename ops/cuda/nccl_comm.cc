#include "nccl_comm.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../data_mover.h"
#include "../mpi.h"
#include "../shared_gpu.h"
#include "cuda_util.h"

namespace kolo {
namespace {

// Whether every rank of `mpi` can make its communicator, said on every rank
// (the check's data is the same everywhere, so no rank goes on to wait in
// ncclCommInitRank for one that stopped): each loaded NCCL (`nccl`) and knows
// its GPU, and no two ranks share a GPU unless every rank's NCCL allows it
// (shared_gpu.h); the message names them.
Status CheckEveryRankReady(MPI_Comm mpi, int device, int size, const Status& nccl) {
  struct Who {
    char host[64];
    char bus[32];
    int ok;            // NCCL loaded and the GPU's bus id known
    int shares;        // this rank's NCCL lets ranks share a GPU
    int nccl_version;  // the loaded NCCL's code
  };
  Who me{};
  gethostname(me.host, sizeof(me.host) - 1);
  Status mine = nccl;
  if (mine.ok()) {
    mine =
        CudaStatus(cudaDeviceGetPCIBusId(me.bus, sizeof(me.bus), device), "cudaDeviceGetPCIBusId");
  }
  me.ok = mine.ok() ? 1 : 0;
  if (nccl.ok()) {
    me.nccl_version = Nccl().version;
    // NCCL's own setting, read as NCCL reads it (not one of kolo's).
    me.shares =
        NcclSharesGpu(me.nccl_version, std::getenv("NCCL_MULTI_RANK_GPU_ENABLE")).allowed ? 1 : 0;
  }
  std::vector<Who> all(size);
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allgather(&me, sizeof(Who), MPI_BYTE, all.data(), sizeof(Who), MPI_BYTE, mpi),
                "MPI_Allgather"));
  KOLO_RETURN_IF_ERROR(mine);
  for (int i = 0; i < size; ++i) {
    if (!all[i].ok) {
      return Status::PreconditionFailed("rank " + std::to_string(i) +
                                        " of this process set (host " + all[i].host +
                                        ") cannot use NCCL or its GPU; its error names why");
    }
  }
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      if (std::strcmp(all[i].host, all[j].host) != 0 || std::strcmp(all[i].bus, all[j].bus) != 0) {
        continue;
      }
      if (all[i].shares && all[j].shares) continue;
      const Who& refusing = all[i].shares ? all[j] : all[i];
      return Status::InvalidArgument(
          "ranks " + std::to_string(i) + " and " + std::to_string(j) +
          " of this process set both use the GPU at PCI " + all[i].bus + " on host " + all[i].host +
          "; " + NcclSharesGpu(refusing.nccl_version, nullptr).advice +
          ". Start with `kolorun --pin-gpus` (one GPU per local rank), or call "
          "torch.cuda.set_device(kolo.local_rank()) before using the GPU");
    }
  }
  return Status::OK();
}

// One communicator over the ranks of `mpi`: rank 0 makes the unique id and
// broadcasts it (with whether that worked, so no rank waits in vain).
Status InitComm(MPI_Comm mpi, int device, NcclComm* out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(mpi, &rank);
  MPI_Comm_size(mpi, &size);
  struct {
    int ok;
    ncclUniqueId id;
  } msg{};
  if (rank == 0) msg.ok = Nccl().GetUniqueId(&msg.id) == ncclSuccess ? 1 : 0;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(&msg, sizeof(msg), MPI_BYTE, 0, mpi), "MPI_Bcast(ncclUniqueId)"));
  if (!msg.ok) return Status::Internal("ncclGetUniqueId failed on the set's rank 0");
  DeviceGuard guard(device);
  return NcclStatus(Nccl().CommInitRank(out->out(), size, msg.id, rank), "ncclCommInitRank");
}

}  // namespace

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  if (broken_) {
    Nccl().CommAbort(comm_);
  } else {
    // Flush what was issued (blocking communicator: returns when quiescent),
    // then free the local resources.
    Nccl().CommFinalize(comm_);
    Nccl().CommDestroy(comm_);
  }
}

void NcclComm::Abort() {
  if (comm_ != nullptr && !broken_) Nccl().CommAbort(comm_);
  comm_ = nullptr;
  broken_ = true;
}

Status CommState::CheckAsyncErrors() {
  if (!broken.empty()) return Status::Internal(broken);
  for (NcclComm* comm : {&flat, &local, &cross, &host}) {
    if (!*comm) continue;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = Nccl().CommGetAsyncError(comm->get(), &async);
    if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) continue;
    Status why = NcclStatus(r != ncclSuccess ? r : async, "NCCL (asynchronous error)", comm->get());
    AbortAll(why.message() + "; the NCCL communicator was aborted, restart the job");
    return Status::Internal(broken);
  }
  return Status::OK();
}

void CommState::AbortAll(const std::string& why) {
  broken = why;
  flat.Abort();
  local.Abort();
  cross.Abort();
  host.Abort();
}

void NcclSetComms::Abort() {
  for (auto& [device, state] : by_device_) {
    if (state->broken.empty())
      state->AbortAll("the job lost a rank; the NCCL communicators were aborted");
  }
}

Result<std::shared_ptr<CommState>> NcclSetComms::Get(int device) {
  auto it = by_device_.find(device);
  if (it != by_device_.end()) {
    if (!it->second->broken.empty()) return Status::Internal(it->second->broken);
    return it->second;
  }
  auto c = std::make_shared<CommState>();
  MPI_Comm_rank(mpi_, &c->rank);
  MPI_Comm_size(mpi_, &c->size);
  // NCCL is loaded by the first communicator (nccl_api.h), on every rank.
  KOLO_RETURN_IF_ERROR(CheckEveryRankReady(mpi_, device, c->size, LoadNccl().status()));
  KOLO_RETURN_IF_ERROR(InitComm(mpi_, device, &c->flat));
  if (hierarchical_) {
    std::string why_not;
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> h, Hierarchy::Create(mpi_, &why_not));
    if (h) {
      c->local_rank = h->local_rank;
      c->local_size = h->local_size;
      KOLO_RETURN_IF_ERROR(InitComm(h->local.get(), device, &c->local));
      KOLO_RETURN_IF_ERROR(InitComm(h->cross.get(), device, &c->cross));
    }
  }
  by_device_[device] = c;
  return c;
}

Status NcclSetComms::PrepareAdasum(CommState& c, int device) {
  if (c.adasum_ready) return Status::OK();
  std::string why_not;  // one host: `flat` is the host's communicator
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> h, Hierarchy::Create(mpi_, &why_not));
  if (h) {
    KOLO_RETURN_IF_ERROR(InitComm(h->local.get(), device, &c.host));
    c.host_mpi = std::move(h);
  }
  c.adasum_ready = true;
  return Status::OK();
}

}  // namespace kolo
