#include "replacements.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ops/mpi.h"

namespace kolo {
namespace {

// The tag of the bridging MPI_Intercomm_create (on the pair communicator only).
constexpr int kBridgeTag = 6060;

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

ReplacementSpawn::ReplacementSpawn(ReplacementRequest request) : request_(std::move(request)) {
  thread_ = std::thread([this] { Spawn(); });
}

ReplacementSpawn::~ReplacementSpawn() {
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  if (children_ != MPI_COMM_NULL && MpiUsable()) MPI_Comm_free(&children_);
}

// One application per host (MPI_Comm_spawn_multiple), so that each process
// lands where it was asked; dead ranks keep their slots in PRRTE's books,
// hence OVERSUBSCRIBE.
void ReplacementSpawn::Spawn() {
  std::map<std::string, int> per_host;
  std::vector<std::string> order;
  for (const std::string& h : request_.hosts) {
    if (per_host[h]++ == 0) order.push_back(h);
  }
  const int apps = static_cast<int>(order.size());
  std::string environment;
  for (const std::string& e : request_.environment) environment += e + "\n";
  std::vector<std::unique_ptr<Info>> infos;
  std::vector<MPI_Info> info_handles;
  std::vector<char*> commands(apps, const_cast<char*>(request_.command.c_str()));
  std::vector<char*> args;
  for (const std::string& a : request_.args) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char**> argvs(apps, args.data());
  std::vector<int> counts;
  for (const std::string& h : order) {
    infos.push_back(std::make_unique<Info>());
    infos.back()->Set("host", h);
    if (std::find(request_.added.begin(), request_.added.end(), h) != request_.added.end()) {
      infos.back()->Set("PMIX_ADD_HOST", h + ":" + std::to_string(per_host[h]));
    }
    infos.back()->Set("map-by", "slot:OVERSUBSCRIBE");
    infos.back()->Set("PMIX_ENVAR", environment);
    info_handles.push_back(infos.back()->get());
    counts.push_back(per_host[h]);
  }
  std::vector<int> errors(request_.hosts.size(), MPI_SUCCESS);
  MPI_Comm children = MPI_COMM_NULL;
  const int rc = apps == 0 ? MPI_ERR_ARG
                           : MPI_Comm_spawn_multiple(apps, commands.data(), argvs.data(),
                                                     counts.data(), info_handles.data(), 0,
                                                     MPI_COMM_SELF, &children, errors.data());
  Status status = GrowStatus(rc, "MPI_Comm_spawn_multiple");
  for (size_t i = 0; status.ok() && i < errors.size(); ++i) {
    if (errors[i] != MPI_SUCCESS) status = GrowStatus(errors[i], "a replacement's start");
  }
  if (status.ok()) MPI_Comm_set_errhandler(children, MPI_ERRORS_RETURN);
  MutexLock lock(&mu_);
  status_ = status;
  children_ = status.ok() ? children : MPI_COMM_NULL;
  done_ = true;
}

bool ReplacementSpawn::Done() const {
  MutexLock lock(&mu_);
  return done_;
}

Status ReplacementSpawn::status() const {
  MutexLock lock(&mu_);
  return status_;
}

Result<MPI_Comm> ReplacementSpawn::Take() {
  if (thread_.joinable()) thread_.join();
  MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  MPI_Comm children = children_;
  children_ = MPI_COMM_NULL;
  if (children == MPI_COMM_NULL) return Status::PreconditionFailed("the replacements were taken");
  return children;
}

Result<MPI_Comm> MergeReplacements(MPI_Comm ranks, MPI_Comm children) {
  int rank = 0;
  MPI_Comm_rank(ranks, &rank);
  MPI_Comm pair = MPI_COMM_NULL;
  if (rank == 0) {
    if (children == MPI_COMM_NULL) {
      return Status::PreconditionFailed("growing in place: rank 0 has no spawned processes");
    }
    const int rc = MPI_Intercomm_merge(children, 0, &pair);
    MPI_Comm_free(&children);
    KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_merge with the new processes"));
    MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
  }
  // In the pair, rank 0 is 0 and the first new process is 1.
  MPI_Comm inter = MPI_COMM_NULL;
  int rc = MPI_Intercomm_create(ranks, 0, pair, 1, kBridgeTag, &inter);
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_create"));
  MPI_Comm merged = MPI_COMM_NULL;
  rc = MPI_Intercomm_merge(inter, 0, &merged);
  MPI_Comm_free(&inter);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_merge"));
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
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
  MPI_Comm inter = MPI_COMM_NULL;
  rc = MPI_Intercomm_create(MPI_COMM_WORLD, 0, pair, 0, kBridgeTag, &inter);
  MPI_Comm_free(&pair);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_create"));
  MPI_Comm merged = MPI_COMM_NULL;
  rc = MPI_Intercomm_merge(inter, 1, &merged);
  MPI_Comm_free(&inter);
  KOLO_RETURN_IF_ERROR(GrowStatus(rc, "MPI_Intercomm_merge"));
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

}  // namespace kolo
