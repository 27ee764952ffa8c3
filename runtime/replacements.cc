#include "replacements.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "ops/mpi.h"
#include "ops/ulfm.h"

namespace kolo {
namespace {

// The tag of the bridging MPI_Intercomm_create (on the pair communicator only).
constexpr int kBridgeTag = 6060;
// What starts a new process with the environment it is given.
constexpr const char* kEnvProgram = "/usr/bin/env";
// How long rank 0 waits at the join for the new processes to answer. They
// wait in JoinAsReplacement since their start, so a live one answers at once.
constexpr std::chrono::seconds kNewProcessPatience{10};
// What rank 0 tells the new processes on the pair once they all answered:
// join the job at this commit, or end (the job ended before they joined).
constexpr int kJoin = 1;
constexpr int kNothingToJoin = 0;

Status GrowStatus(int rc, const char* call) {
  Status s = MpiStatus(rc, call);
  if (s.ok()) return s;
  return Status::Internal("growing in place: " + s.message());
}

// An MPI_Info owned here.
class Info {
 public:
  Info() { MPI_Info_create(&info_); }
  ~Info() { MPI_Info_free(&info_); }
  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  void Set(const char* key, const std::string& value) { MPI_Info_set(info_, key, value.c_str()); }
  MPI_Info get() const { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

}  // namespace

ReplacementSpawn::ReplacementSpawn(ReplacementRequest request)
    : outcome_(std::make_shared<Outcome>()) {
  thread_ = std::thread(
      [request = std::move(request), outcome = outcome_] { Spawn(request, outcome.get()); });
}

ReplacementSpawn::~ReplacementSpawn() {
  if (thread_.joinable() && !Done()) {
    thread_.detach();  // still in MPI_Comm_spawn, maybe for ever
    return;
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&outcome_->mu);
  if (outcome_->pair != MPI_COMM_NULL && MpiUsable()) MPI_Comm_free(&outcome_->pair);
}

// One application per host (MPI_Comm_spawn_multiple), so that each process
// lands where it was asked; dead ranks keep their slots in PRRTE's books,
// hence OVERSUBSCRIBE.
void ReplacementSpawn::Spawn(const ReplacementRequest& request, Outcome* outcome) {
  std::map<std::string, int> per_host;
  std::vector<std::string> order;
  for (const std::string& h : request.hosts) {
    if (per_host[h]++ == 0) order.push_back(h);
  }
  const int apps = static_cast<int>(order.size());
  // The environment travels as env(1)'s arguments: an info value (PMIX_ENVAR)
  // holds at most MPI_MAX_INFO_VAL (256) characters, and the new processes
  // inherit nothing of the job's environment.
  const std::string command = request.environment.empty() ? request.command : kEnvProgram;
  std::vector<std::string> words = request.environment;
  if (!request.environment.empty()) words.push_back(request.command);
  words.insert(words.end(), request.args.begin(), request.args.end());
  std::vector<std::unique_ptr<Info>> infos;
  std::vector<MPI_Info> info_handles;
  std::vector<char*> commands(apps, const_cast<char*>(command.c_str()));
  std::vector<char*> args;
  for (const std::string& a : words) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char**> argvs(apps, args.data());
  std::vector<int> counts;
  std::error_code ec;
  const std::string directory = std::filesystem::current_path(ec).string();  // rank 0's
  for (const std::string& h : order) {
    infos.push_back(std::make_unique<Info>());
    infos.back()->Set("host", h);
    if (std::find(request.added.begin(), request.added.end(), h) != request.added.end()) {
      infos.back()->Set("PMIX_ADD_HOST", h + ":" + std::to_string(per_host[h]));
    }
    infos.back()->Set("map-by", "slot:OVERSUBSCRIBE");
    if (!ec) infos.back()->Set("wdir", directory);
    info_handles.push_back(infos.back()->get());
    counts.push_back(per_host[h]);
  }
  std::vector<int> errors(request.hosts.size(), MPI_SUCCESS);
  MPI_Comm children = MPI_COMM_NULL;
  // A spawn that fails (a host PRRTE cannot reach, no slot) reports on the
  // communicator it was called on: a status here, not an abort of rank 0.
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  const int rc = apps == 0 ? MPI_ERR_ARG
                           : MPI_Comm_spawn_multiple(apps, commands.data(), argvs.data(),
                                                     counts.data(), info_handles.data(), 0,
                                                     MPI_COMM_SELF, &children, errors.data());
  Status status = GrowStatus(rc, "MPI_Comm_spawn_multiple");
  for (size_t i = 0; status.ok() && i < errors.size(); ++i) {
    if (errors[i] != MPI_SUCCESS) status = GrowStatus(errors[i], "a replacement's start");
  }
  // The new processes merge with this rank right after their MPI_Init: the
  // pair communicator is made here, while they are surely alive, so that no
  // merge (which allocates a communicator id, and holds the allocation of
  // any later one on this rank while it waits) is left waiting for a process
  // that died meanwhile.
  MPI_Comm pair = MPI_COMM_NULL;
  if (status.ok()) {
    MPI_Comm_set_errhandler(children, MPI_ERRORS_RETURN);
    status = GrowStatus(MPI_Intercomm_merge(children, 0, &pair),
                        "MPI_Intercomm_merge with the new processes");
    MPI_Comm_free(&children);
  }
  if (status.ok()) MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
  MutexLock lock(&outcome->mu);
  outcome->status = status;
  outcome->pair = status.ok() ? pair : MPI_COMM_NULL;
  outcome->done = true;
}

bool ReplacementSpawn::Done() const {
  MutexLock lock(&outcome_->mu);
  return outcome_->done;
}

Status ReplacementSpawn::status() const {
  MutexLock lock(&outcome_->mu);
  return outcome_->status;
}

bool ReplacementSpawn::WaitUntilDone(std::chrono::milliseconds patience) const {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!Done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

Result<MPI_Comm> ReplacementSpawn::Take() {
  if (!Done()) return Status::PreconditionFailed("the new processes are still starting");
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&outcome_->mu);
  if (!outcome_->status.ok()) return outcome_->status;
  MPI_Comm pair = outcome_->pair;
  outcome_->pair = MPI_COMM_NULL;
  if (pair == MPI_COMM_NULL) return Status::PreconditionFailed("the replacements were taken");
  return pair;
}

namespace {

// Both sides' last step: an intercommunicator between `local` (the running
// ranks, or the new processes' own world) and the other side, bridged by
// `pair` (rank 0 and the new processes, freed here; null on the running ranks
// but rank 0), then merged into one communicator, the new processes ranked
// after the running ones (`high` on their side).
Result<MPI_Comm> BridgeAndMerge(MPI_Comm local, MPI_Comm* pair, int remote_leader, bool high) {
  MPI_Comm inter = MPI_COMM_NULL;
  int rc = MPI_Intercomm_create(local, 0, *pair, remote_leader, kBridgeTag, &inter);
  if (*pair != MPI_COMM_NULL) MPI_Comm_free(pair);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_create"));
  MPI_Comm merged = MPI_COMM_NULL;
  rc = MPI_Intercomm_merge(inter, high ? 1 : 0, &merged);
  MPI_Comm_free(&inter);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_merge"));
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

// Rank 0, before the join: whether every new process still answers on
// `pair` (each enters a barrier there before its join), within
// kNewProcessPatience. A new process that died after its merge with rank 0,
// or stopped, never does (PRRTE 3.0 reports no failure there): the pair is
// then revoked (ULFM), which ends the barrier of any that are alive, and left
// as it is (freeing a communicator whose processes are gone can wait for ever).
Status NewProcessesAnswer(MPI_Comm pair) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(pair, &request);
  const auto deadline = std::chrono::steady_clock::now() + kNewProcessPatience;
  int done = 0;
  while (rc == MPI_SUCCESS && !done && std::chrono::steady_clock::now() < deadline) {
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (rc == MPI_SUCCESS && done) return Status::OK();
  RevokeIfUsable(pair);
  if (rc != MPI_SUCCESS) {
    return Status::Aborted("one died after initializing MPI (" +
                           MpiStatus(rc, "MPI_Ibarrier").message() + ")");
  }
  return Status::Aborted("no answer from them within " +
                         std::to_string(kNewProcessPatience.count()) +
                         " s of the join: stopped, or dead after initializing MPI");
}

// Rank 0, once every new process answered: what they are to do (kJoin or
// kNothingToJoin), the word they wait for after the barrier.
Status TellNewProcesses(MPI_Comm pair, int word) {
  return GrowStatus(MPI_Bcast(&word, 1, MPI_INT, 0, pair), "MPI_Bcast to the new processes");
}

}  // namespace

Result<MPI_Comm> MergeReplacements(MPI_Comm ranks, MPI_Comm pair) {
  int rank = 0;
  MPI_Comm_rank(ranks, &rank);
  Status paired;
  if (rank == 0) {
    paired = pair == MPI_COMM_NULL ? Status::Aborted("rank 0 has no spawned processes")
                                   : NewProcessesAnswer(pair);
    if (paired.ok()) paired = TellNewProcesses(pair, kJoin);
  }
  // Rank 0 tells the others whether the new processes came: if not, nobody
  // goes on to the bridge, and the ranks stay as they were.
  int came = paired.ok() ? 1 : 0;
  KOLO_RETURN_IF_ERROR(GrowStatus(MPI_Bcast(&came, 1, MPI_INT, 0, ranks), "MPI_Bcast"));
  if (!came) {
    return rank == 0 ? paired : Status::Aborted("the new processes did not join (rank 0 says why)");
  }
  // In the pair, rank 0 is 0 and the first new process is 1.
  return BridgeAndMerge(ranks, &pair, /*remote_leader=*/1, /*high=*/false);
}

Status DismissReplacements(MPI_Comm pair) {
  // A pair that did not answer is revoked and left as it is (NewProcessesAnswer).
  KOLO_RETURN_IF_ERROR(NewProcessesAnswer(pair));
  Status told = TellNewProcesses(pair, kNothingToJoin);
  MPI_Comm_free(&pair);
  return told;
}

Result<MPI_Comm> JoinAsReplacement() {
  const char* replacement = std::getenv("KOLO_ELASTIC_REPLACEMENT");
  if (replacement == nullptr || std::strcmp(replacement, "1") != 0) return MPI_COMM_NULL;
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) return MPI_COMM_NULL;
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  MPI_Comm pair = MPI_COMM_NULL;
  int rc = MPI_Intercomm_merge(parent, 1, &pair);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_merge with the rank that started us"));
  MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
  // Rank 0's check that every new process is still there (NewProcessesAnswer;
  // a nonblocking barrier, which a blocking one would not match).
  MPI_Request request = MPI_REQUEST_NULL;
  rc = MPI_Ibarrier(pair, &request);
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Ibarrier with the rank that started us"));
  int word = kNothingToJoin;
  rc = MPI_Bcast(&word, 1, MPI_INT, 0, pair);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Bcast from the rank that started us"));
  if (word == kNothingToJoin) {
    MPI_Comm_free(&pair);
    return Status::Aborted("the job ended before this new process joined it");
  }
  return BridgeAndMerge(MPI_COMM_WORLD, &pair, /*remote_leader=*/0, /*high=*/true);
}

}  // namespace kolo
