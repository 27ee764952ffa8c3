// Point-to-point messages outside kolo's negotiation, for kolo's
// torch.distributed backend (send, recv, isend, irecv, recv from any source,
// batch_isend_irecv, monitored_barrier).
//
// kolo pairs collectives by negotiating among every rank of a process set; a
// message between two ranks needs no agreement of the others, so it goes
// straight to MPI from the caller's thread: MPI_Isend / MPI_Irecv on a
// communicator of its own per torch.distributed group, made with
// MPI_Comm_create_group over the group's ranks of MPI_COMM_WORLD (collective
// over the members only), so these messages never meet kolo's negotiation or
// another group's. kolo initializes MPI with MPI_THREAD_MULTIPLE, under which
// a caller's thread may call MPI while the background thread runs; Create()
// refuses without it.
//
// Waiting polls MPI_Test without the GIL: back to back first, yielding the
// core between two tests (ranks may share cores), for as long as the
// message's bytes would take to move at a slow copy's rate, then with sleeps
// backing off to 1 ms. Open MPI moves a message past its eager size
// (rendezvous) only while its ranks are inside MPI, so a waiter that slept
// during the transfer would stall it; once the spin is over, the peer has
// most likely not posted its side yet, and sleeping leaves the core to the
// others. The binding gives Python a look at its signals every 0.1 s and
// bounds the wait by the caller's timeout; a receive that timed out is
// withdrawn with MPI_Cancel. Messages are bytes: a receive checks that the
// sender sent exactly as many bytes as its tensor holds (more is
// MPI_ERR_TRUNCATE, fewer a short count); a dtype or shape that differs at
// the same size cannot be seen, as with gloo.
#include "p2p.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "ops/mpi.h"

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;

// MPI_Comm_create_group's tag; creations run in the same order on every
// member, one at a time, so one tag serves them all.
constexpr int kCreateTag = 0x6b6f;
// How long a waiter polls MPI_Test back to back before it starts sleeping: a
// base for the peer to post its side, plus the message's bytes at
// kSpinBytesPerSecond (slower than any copy in memory, so that a transfer
// under way is never left to sleeps). Then sleeps from kFirstPause, doubling
// up to kMaxPause.
constexpr auto kSpin = std::chrono::microseconds(200);
constexpr double kSpinBytesPerSecond = 1e9;
constexpr auto kFirstPause = std::chrono::microseconds(20);
constexpr auto kMaxPause = std::chrono::milliseconds(1);

}  // namespace

MpiP2PRequest::~MpiP2PRequest() {
  if (!MpiUsable()) return;
  MutexLock lock(&mu_);
  if (done_) return;
  if (recv_) {
    MPI_Cancel(&request_);
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
  } else {
    MPI_Request_free(&request_);
  }
}

void MpiP2PRequest::Finish(int rc, const MPI_Status& st) {
  done_ = true;
  request_ = MPI_REQUEST_NULL;
  if (!recv_) {
    if (rc != MPI_SUCCESS) status_ = MpiStatus(rc, "MPI_Isend");
    return;
  }
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  if (cancelled) {
    status_ = Status::Aborted("the receive was withdrawn: no matching message came");
    return;
  }
  source_ = st.MPI_SOURCE;
  int error_class = MPI_SUCCESS;
  if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
  const std::string tensor = "the receiving tensor holds " + std::to_string(bytes_) + " bytes";
  if (error_class == MPI_ERR_TRUNCATE) {
    status_ = Status::PreconditionFailed("rank " + std::to_string(source_) +
                                         " sent a larger tensor: more bytes than " + tensor);
  } else if (rc != MPI_SUCCESS) {
    status_ = MpiStatus(rc, "MPI_Irecv");
  } else {
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (count != bytes_) {
      status_ = Status::PreconditionFailed("rank " + std::to_string(source_) + " sent " +
                                           std::to_string(count) + " bytes, but " + tensor);
    }
  }
}

bool MpiP2PRequest::Test() {
  MutexLock lock(&mu_);
  if (done_) return true;
  if (!MpiUsable()) {  // kolo shut down, and MPI with it
    done_ = true;
    status_ = Status::Aborted("MPI was finalized (kolo shut down) before the message arrived");
    return true;
  }
  int flag = 0;
  MPI_Status st;
  const int rc = MPI_Test(&request_, &flag, &st);
  if (rc != MPI_SUCCESS || flag) Finish(rc, st);
  return done_;
}

Clock::duration MpiP2PRequest::SpinTime() const {
  return kSpin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                     static_cast<double>(bytes_) / kSpinBytesPerSecond));
}

bool MpiP2PRequest::WaitFor(double seconds, double waited) {
  const auto start = Clock::now();
  const auto to_duration = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const auto deadline = start + to_duration(seconds);
  const auto spin_until = start + SpinTime() - to_duration(waited);
  Clock::duration pause = kFirstPause;
  for (;;) {
    if (Test()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (now < spin_until) {
      sched_yield();  // a rank that shares this core runs; none: back at once
      continue;
    }
    std::this_thread::sleep_for(std::min(pause, deadline - now));
    pause = std::min<Clock::duration>(pause * 2, kMaxPause);
  }
}

bool MpiP2PRequest::Cancel() {
  MutexLock lock(&mu_);
  if (done_ || !recv_) return false;
  MPI_Cancel(&request_);
  MPI_Status st;
  const int rc = MPI_Wait(&request_, &st);
  Finish(rc, st);
  return status_.code() == StatusCode::kAborted;
}

Result<std::shared_ptr<P2PComm>> MpiP2PComm::Create(MPI_Comm world, const std::vector<int>& ranks,
                                                    int kolo_rank, int kolo_size) {
  if (!MpiUsable())
    return Status::PreconditionFailed("MPI is not initialized (kolo is not running)");
  int provided = 0, world_rank = 0, world_size = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    return Status::Unimplemented(
        "point-to-point messages need MPI_THREAD_MULTIPLE (they are sent from the caller's "
        "thread while kolo's background thread runs), but MPI was initialized with less; let "
        "kolo initialize MPI, or use MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  }
  MPI_Comm_rank(world, &world_rank);
  MPI_Comm_size(world, &world_size);
  if (world_rank != kolo_rank || world_size != kolo_size) {
    return Status::Unimplemented(
        "point-to-point messages run on MPI_COMM_WORLD (or the ranks kolo joined under "
        "torchrun), but kolo runs on another communicator "
        "(rank " +
        std::to_string(kolo_rank) + " of " + std::to_string(kolo_size) + " there, rank " +
        std::to_string(world_rank) + " of " + std::to_string(world_size) +
        " there): start kolo without init(comm=...)");
  }
  if (std::find(ranks.begin(), ranks.end(), world_rank) == ranks.end()) {
    return Status::InvalidArgument("rank " + std::to_string(world_rank) +
                                   " makes a point-to-point communicator it is not a member of");
  }
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_group(world, &world_group);
  int rc = MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(world, group, kCreateTag, &comm);
  MPI_Group_free(&world_group);
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  KOLO_RETURN_IF_ERROR(MpiStatus(rc, "MPI_Comm_create_group"));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0, found = 0;
  int* tag_ub = nullptr;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm_get_attr(world, MPI_TAG_UB, &tag_ub, &found);
  return std::shared_ptr<P2PComm>(new MpiP2PComm(comm, rank, size, found ? *tag_ub : 32767));
}

void MpiP2PComm::Free() {
  MutexLock lock(&mu_);
  comm_ = MpiComm();  // frees it, unless MPI was finalized
}

Result<std::shared_ptr<P2PRequest>> MpiP2PComm::Start(bool recv, uintptr_t data, int64_t bytes,
                                                      int peer, int tag) {
  const char* what = recv ? "recv" : "send";
  if (peer < (recv ? -1 : 0) || peer >= size_) {
    return Status::InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                                   " is not in this group, whose ranks are 0 to " +
                                   std::to_string(size_ - 1));
  }
  if (tag < 0 || tag > tag_ub_) {
    return Status::InvalidArgument(std::string(what) + ": tag " + std::to_string(tag) +
                                   " is outside 0 to " + std::to_string(tag_ub_) + " (MPI_TAG_UB)");
  }
  if (bytes < 0 || bytes > INT_MAX) {
    return Status::InvalidArgument(std::string(what) + ": a tensor of " + std::to_string(bytes) +
                                   " bytes; kolo's point-to-point messages hold at most " +
                                   std::to_string(INT_MAX) + " bytes (2 GiB - 1)");
  }
  MutexLock lock(&mu_);
  if (!MpiUsable() || !comm_) {
    return Status::PreconditionFailed(std::string(what) +
                                      ": the process group was destroyed (or kolo shut down)");
  }
  void* buffer = reinterpret_cast<void*>(data);
  const int count = static_cast<int>(bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = recv ? MPI_Irecv(buffer, count, MPI_BYTE, peer < 0 ? MPI_ANY_SOURCE : peer, tag,
                                  comm_.get(), &request)
                      : MPI_Isend(buffer, count, MPI_BYTE, peer, tag, comm_.get(), &request);
  KOLO_RETURN_IF_ERROR(MpiStatus(rc, recv ? "MPI_Irecv" : "MPI_Isend"));
  return std::shared_ptr<P2PRequest>(std::make_shared<MpiP2PRequest>(request, recv, bytes, peer));
}

}  // namespace kolo
