#include "cloud_hosts.h"

#include <algorithm>
#include <set>

#include "json_value.h"

namespace kolo::launcher {
namespace {

using Env = std::map<std::string, std::string>;

std::string Get(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// The variables through which the MPI Operator names the hostfile, one per
// mpiImplementation (Open MPI 4's, Open MPI 5's, MPICH's, Intel MPI's).
constexpr const char* kHostfileVariables[] = {"OMPI_MCA_orte_default_hostfile",
                                              "PRTE_MCA_prte_default_hostfile", "HYDRA_HOST_FILE",
                                              "I_MPI_HYDRA_HOST_FILE"};

// A count of SM_NUM_GPUS / SM_NUM_CPUS: a whole number, 0 allowed; -1 when unset.
Result<int> SageMakerCount(const Env& env, const char* name) {
  const std::string text = Get(env, name);
  if (text.empty()) return -1;
  if (text.size() > 7 || !std::all_of(text.begin(), text.end(),
                                      [](unsigned char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument(std::string(name) + "='" + text +
                                   "' is not a whole number of devices");
  }
  return std::stoi(text);
}

// Each host's slots: its GPUs, or on a CPU instance its CPUs, as SageMaker's
// training toolkit counts them (SageMaker's hosts of a job are alike). With
// neither count given, a job of one host takes `one_host_slots` (kolorun's
// default for this machine); across hosts kolorun cannot tell.
Result<int> SageMakerSlots(const Env& env, size_t hosts, int one_host_slots) {
  KOLO_ASSIGN_OR_RETURN(int gpus, SageMakerCount(env, "SM_NUM_GPUS"));
  KOLO_ASSIGN_OR_RETURN(int cpus, SageMakerCount(env, "SM_NUM_CPUS"));
  if (gpus > 0) return gpus;
  if (cpus > 0) return cpus;
  if (gpus < 0 && cpus < 0 && hosts == 1) return std::max(one_host_slots, 1);
  return Status::InvalidArgument(
      "SageMaker: " +
      std::string(gpus < 0 && cpus < 0 ? "SM_NUM_GPUS and SM_NUM_CPUS are unset"
                                       : "SM_NUM_GPUS and SM_NUM_CPUS say no device") +
      ", so kolorun cannot tell how many ranks each host takes; set SM_NUM_GPUS in the "
      "training job's environment, or give the hosts with -H algo-1:N,algo-2:N");
}

Result<std::vector<std::string>> HostNames(const JsonValue& list, const std::string& what) {
  const std::string expected =
      what + ": expected a list of host names such as [\"algo-1\",\"algo-2\"]";
  if (list.kind != JsonValue::Kind::kArray) return Status::InvalidArgument(expected);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const JsonValue& item : list.items) {
    if (item.kind != JsonValue::Kind::kString) return Status::InvalidArgument(expected);
    KOLO_RETURN_IF_ERROR(CheckHostName(item.text, what));
    if (!seen.insert(item.text).second) {
      return Status::InvalidArgument(what + ": host '" + item.text + "' is listed twice");
    }
    names.push_back(item.text);
  }
  if (names.empty()) return Status::InvalidArgument(what + " lists no hosts");
  return names;
}

}  // namespace

std::optional<MpiOperatorHostfile> FindMpiOperatorHostfile(const Env& env) {
  const bool launcher = Get(env, "K_MPI_JOB_ROLE") == "launcher";
  MpiOperatorHostfile pod;
  std::string variable;
  for (const char* name : kHostfileVariables) {
    if (Get(env, name).empty()) continue;
    pod.path = Get(env, name);
    variable = name;
    break;
  }
  if (pod.path.empty()) {
    if (!launcher) return std::nullopt;
    pod.path = std::string(kMpiOperatorDir) + "/hostfile";
  }
  if (!launcher) {
    // A variable set by hand outside an MPIJob: a default hostfile as the MPI would read it.
    pod.source = variable + " (" + pod.path + ")";
    return pod;
  }
  pod.source = "MPI Operator (" + pod.path + ")";
  const size_t slash = pod.path.rfind('/');
  pod.discovery_script =
      (slash == std::string::npos ? std::string(".") : pod.path.substr(0, slash)) +
      "/discover_hosts.sh";
  return pod;
}

Result<Allocation> MpiOperatorAllocation(const MpiOperatorHostfile& pod, FileReader read_file) {
  Result<std::string> text = read_file(pod.path);
  if (!text.ok()) {
    return Status::InvalidArgument(text.status().message() + " (the hosts of " + pod.source +
                                   "); give the hosts with -H or --hostfile");
  }
  Result<std::vector<HostSlots>> hosts = ParseHostfile(text.value());
  if (!hosts.ok()) return Status::InvalidArgument(pod.path + ": " + hosts.status().message());
  Allocation a;
  a.source = pod.source;
  a.hosts = std::move(hosts).value();
  // Only an MPIJob's machines were started for this job (not a hostfile named by hand).
  a.started_for_job = !pod.discovery_script.empty();
  a.discovery_script = pod.discovery_script;
  return a;
}

Status RefuseMpiOperatorWorker(const Env& env) {
  if (Get(env, "K_MPI_JOB_ROLE") != "worker") return Status::OK();
  return Status::InvalidArgument(
      "K_MPI_JOB_ROLE=worker: this is a worker pod of an MPIJob, whose command is sshd; run "
      "kolorun as the launcher's command (it reaches every worker through ssh), or give the "
      "hosts with -H / --hostfile");
}

bool HostsStartWithTheJob(const Env& env) {
  return Get(env, "K_MPI_JOB_ROLE") == "launcher" || InSageMaker(env);
}

Result<std::vector<std::string>> ParseSageMakerHostList(const std::string& json) {
  Result<JsonValue> value = ParseJson(json);
  if (!value.ok()) return Status::InvalidArgument("SM_HOSTS: " + value.status().message());
  return HostNames(value.value(), "SM_HOSTS");
}

Result<SageMakerResourceConfig> ParseSageMakerResourceConfig(const std::string& json) {
  KOLO_ASSIGN_OR_RETURN(JsonValue value, ParseJson(json));
  if (value.kind != JsonValue::Kind::kObject) {
    return Status::InvalidArgument("expected an object with \"hosts\" and \"current_host\"");
  }
  const JsonValue* hosts = value.Member("hosts");
  if (hosts == nullptr) return Status::InvalidArgument("no \"hosts\" list");
  SageMakerResourceConfig config;
  KOLO_ASSIGN_OR_RETURN(config.hosts, HostNames(*hosts, "\"hosts\""));
  const JsonValue* current = value.Member("current_host");
  if (current != nullptr) {
    if (current->kind != JsonValue::Kind::kString) {
      return Status::InvalidArgument("\"current_host\" is not a string");
    }
    config.current_host = current->text;
  }
  return config;
}

bool InSageMaker(const Env& env) {
  return !Get(env, "SM_HOSTS").empty() || !Get(env, "SM_CURRENT_HOST").empty() ||
         !Get(env, "TRAINING_JOB_ARN").empty();
}

Result<Allocation> SageMakerAllocation(const Env& env, FileReader read_file, int one_host_slots) {
  SageMakerResourceConfig config;
  if (!Get(env, "SM_HOSTS").empty()) {
    KOLO_ASSIGN_OR_RETURN(config.hosts, ParseSageMakerHostList(Get(env, "SM_HOSTS")));
  } else {
    Result<std::string> text = read_file(kSageMakerResourceConfig);
    if (!text.ok()) {
      return Status::InvalidArgument("SageMaker: " + text.status().message() +
                                     " and SM_HOSTS is unset; give the hosts with -H");
    }
    Result<SageMakerResourceConfig> read = ParseSageMakerResourceConfig(text.value());
    if (!read.ok()) {
      return Status::InvalidArgument(std::string(kSageMakerResourceConfig) + ": " +
                                     read.status().message());
    }
    config = std::move(read).value();
  }
  if (!Get(env, "SM_CURRENT_HOST").empty()) config.current_host = Get(env, "SM_CURRENT_HOST");
  const std::vector<std::string>& names = config.hosts;
  if (!config.current_host.empty() && config.current_host != names.front()) {
    if (std::find(names.begin(), names.end(), config.current_host) == names.end()) {
      return Status::InvalidArgument("SageMaker: this host, " + config.current_host +
                                     ", is not one of the job's hosts (" + names.front() +
                                     (names.size() > 1 ? ", ..." : "") + ")");
    }
    return Status::InvalidArgument(
        "SageMaker: this is " + config.current_host + ", and kolorun launches the job from the " +
        "first host, " + names.front() + ": run kolorun there only (SageMaker starts the entry " +
        "point on every host; on the others, keep sshd running until the job ends)");
  }
  KOLO_ASSIGN_OR_RETURN(int slots, SageMakerSlots(env, names.size(), one_host_slots));
  Allocation a;
  a.source = "SageMaker";
  for (const std::string& n : names) a.hosts.push_back({n, slots});
  a.started_for_job = true;
  return a;
}

}  // namespace kolo::launcher
