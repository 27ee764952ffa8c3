// The clouds' host sources (launcher/cloud_hosts.h): an MPIJob's launcher
// pod, SageMaker; the hostfile forms they write, the JSON they write, and
// where they stand in ResolveHosts' order.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cloud_hosts.h"
#include "expect_error.h"
#include "hosts.h"
#include "json_value.h"
#include "options.h"

namespace kolo::launcher {
namespace {

using H = std::vector<HostSlots>;
using Env = std::map<std::string, std::string>;

TEST(Hostfile, OpenMpisAndHydrasFormsEvenMixed) {
  // The MPI Operator's two forms: mpiImplementation OpenMPI, and Intel / MPICH.
  EXPECT_EQ(ParseHostfile("job-worker-0.job-worker.ns.svc slots=4\n"
                          "job-worker-1.job-worker.ns.svc slots=4\n")
                .value(),
            (H{{"job-worker-0.job-worker.ns.svc", 4}, {"job-worker-1.job-worker.ns.svc", 4}}));
  EXPECT_EQ(ParseHostfile("w-0.svc:2\nw-1.svc:2\n").value(), (H{{"w-0.svc", 2}, {"w-1.svc", 2}}));
  // Each line says which form it is in: a mix is read line by line.
  EXPECT_EQ(ParseHostfile("a slots=2\nb:3 # hydra's\nc\n").value(),
            (H{{"a", 2}, {"b", 3}, {"c", 1}}));
  // An IPv6 address alone is a host of 1 slot, not "host:N".
  EXPECT_EQ(ParseHostfile("fe80::1\n").value(), (H{{"fe80::1", 1}}));
}

TEST(Hostfile, MalformedLinesAndDuplicatesNameTheirLines) {
  ExpectError(ParseHostfile("a:2\n\nb:two\n").status(), "hostfile line 3: slots 'two' is not");
  ExpectError(ParseHostfile("a:0\n").status(), "hostfile line 1: slots must be at least 1");
  ExpectError(ParseHostfile(":4\n").status(), "hostfile line 1: '' is not a valid host name");
  ExpectError(ParseHostfile("a slots=1\nb:2 slots=3\n").status(),
              "hostfile line 2: expected 'host slots=N' or 'host:N', got 'b:2 slots=3'");
  ExpectError(ParseHostfile("a slots=2\nb:1\n# again\na:2\n").status(),
              "hostfile: host 'a' is listed twice (lines 1 and 4); give each host once");
}

TEST(MpiOperator, TheHostfileIsTheOneItsVariablesName) {
  EXPECT_FALSE(FindMpiOperatorHostfile({}).has_value());
  EXPECT_FALSE(FindMpiOperatorHostfile({{"K_MPI_JOB_ROLE", "worker"}}).has_value());
  // A launcher pod without a variable (Open MPI 5's image: the operator's orte_* are
  // set, but also a pod whose variables were dropped): the operator's mount.
  auto pod = FindMpiOperatorHostfile({{"K_MPI_JOB_ROLE", "launcher"}});
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ(pod->path, "/etc/mpi/hostfile");
  EXPECT_EQ(pod->source, "MPI Operator (/etc/mpi/hostfile)");
  EXPECT_EQ(pod->discovery_script, "/etc/mpi/discover_hosts.sh");
  // The variable of each mpiImplementation, the first that is set.
  for (const char* name : {"OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
                           "HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE"}) {
    pod = FindMpiOperatorHostfile({{"K_MPI_JOB_ROLE", "launcher"}, {name, "/cfg/hosts"}});
    ASSERT_TRUE(pod.has_value()) << name;
    EXPECT_EQ(pod->path, "/cfg/hosts") << name;
    EXPECT_EQ(pod->source, "MPI Operator (/cfg/hosts)") << name;
    EXPECT_EQ(pod->discovery_script, "/cfg/discover_hosts.sh") << name;
  }
  pod = FindMpiOperatorHostfile(
      {{"HYDRA_HOST_FILE", "/h2"}, {"OMPI_MCA_orte_default_hostfile", "/h1"}});
  EXPECT_EQ(pod->path, "/h1");
  // Set by hand outside a pod: read as the MPI would read it, with no discovery script.
  EXPECT_EQ(pod->source, "OMPI_MCA_orte_default_hostfile (/h1)");
  EXPECT_EQ(pod->discovery_script, "");
}

Result<std::string> PodFiles(const std::string& path) {
  if (path == "/etc/mpi/hostfile") return std::string("w-0.w slots=2\nw-1.w slots=2\n");
  if (path == "/hydra") return std::string("w-0.w:1\nw-1.w:1\n");
  if (path == "/bad") return std::string("w-0.w slots=2\nw-0.w slots=2\n");
  if (path == "/opt/ml/input/config/resourceconfig.json") {
    return std::string(R"({"current_host": "algo-1", "current_instance_type": "ml.p4d.24xlarge",)"
                       R"( "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0",)"
                       R"( "instance_groups": [{"instance_group_name": "homogeneousCluster",)"
                       R"( "hosts": ["algo-2", "algo-1"]}]})");
  }
  return Status::InvalidArgument("cannot read '" + path + "': No such file or directory");
}

TEST(MpiOperator, ALauncherPodsAllocation) {
  const Env pod = {{"K_MPI_JOB_ROLE", "launcher"}};
  auto a = ResolveHosts("", "", pod, 0, 2, PodFiles);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a.value().source, "MPI Operator (/etc/mpi/hostfile)");
  EXPECT_EQ(a.value().hosts, (H{{"w-0.w", 2}, {"w-1.w", 2}}));
  EXPECT_TRUE(a.value().started_for_job);
  EXPECT_EQ(a.value().discovery_script, "/etc/mpi/discover_hosts.sh");
  // -H and --hostfile win, as over a scheduler's allocation.
  EXPECT_EQ(ResolveHosts("x:1", "", pod, 0, 2, PodFiles).value().source, "-H");
  EXPECT_EQ(ResolveHosts("", "/hydra", pod, 0, 2, PodFiles).value().source, "--hostfile /hydra");
  a = ResolveHosts("", "", {{"K_MPI_JOB_ROLE", "launcher"}, {"I_MPI_HYDRA_HOST_FILE", "/hydra"}}, 0,
                   2, PodFiles);
  EXPECT_EQ(a.value().hosts, (H{{"w-0.w", 1}, {"w-1.w", 1}}));
  ExpectError(ResolveHosts("", "", {{"K_MPI_JOB_ROLE", "launcher"}, {"HYDRA_HOST_FILE", "/bad"}}, 0,
                           2, PodFiles)
                  .status(),
              "/bad: hostfile: host 'w-0.w' is listed twice (lines 1 and 2)");
  ExpectError(
      ResolveHosts("", "", {{"K_MPI_JOB_ROLE", "launcher"}, {"HYDRA_HOST_FILE", "/gone"}}, 0, 2,
                   PodFiles)
          .status(),
      "cannot read '/gone': No such file or directory (the hosts of MPI Operator (/gone)); give "
      "the hosts with -H or --hostfile");
  // A hostfile named by hand is an allocation, not machines started for this job.
  a = ResolveHosts("", "", {{"HYDRA_HOST_FILE", "/hydra"}}, 0, 2, PodFiles);
  EXPECT_EQ(a.value().source, "HYDRA_HOST_FILE (/hydra)");
  EXPECT_FALSE(a.value().started_for_job);
}

TEST(MpiOperator, AWorkerPodIsNoPlaceForKolorun) {
  const Env worker = {{"K_MPI_JOB_ROLE", "worker"}};
  ExpectError(ResolveHosts("", "", worker, 0, 2, PodFiles).status(),
              "K_MPI_JOB_ROLE=worker: this is a worker pod of an MPIJob, whose command is sshd; "
              "run kolorun as the launcher's command");
  EXPECT_EQ(ResolveHosts("a:1", "", worker, 0, 2, PodFiles).value().source, "-H");
}

Allocation Cloud(H hosts) { return {"MPI Operator (/etc/mpi/hostfile)", hosts, true, ""}; }

TEST(PlaceRanks, EveryHostThatACloudStartedGetsARank) {
  EXPECT_EQ(PlaceRanks(Cloud({{"a", 2}, {"b", 2}}), 0).value(), (H{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(PlaceRanks(Cloud({{"a", 2}, {"b", 2}}), 3).value(), (H{{"a", 2}, {"b", 1}}));
  ExpectError(PlaceRanks(Cloud({{"127.0.0.1", 2}, {"127.0.0.2", 2}}), 2).status(),
              "-np 2 leaves host 127.0.0.2 of MPI Operator (/etc/mpi/hostfile) without a rank "
              "(ranks fill the 4 slots host by host); omit -np to use every slot, give -np 3 or "
              "more, or start the job on fewer hosts");
  ExpectError(PlaceRanks(Cloud({{"a", 4}, {"b", 4}, {"c", 2}}), 1).status(),
              "-np 1 leaves hosts b, c of");
  H many;
  for (int i = 0; i < 20; ++i) many.push_back({"w" + std::to_string(i), 1});
  ExpectError(PlaceRanks(Cloud(many), 2).status(),
              "leaves hosts w2, w3, w4, w5, w6, w7, w8, w9 and 10 more of");
  // A scheduler's allocation may be used in part, as always.
  const Allocation slurm{"Slurm", {{"a", 2}, {"b", 2}}, false, ""};
  EXPECT_EQ(PlaceRanks(slurm, 2).value(), (H{{"a", 2}}));
}

TEST(Json, ValuesOfEveryKind) {
  auto v = ParseJson(R"( {"a": [1, -2.5e3, true, false, null, "x\"\\\/\n\u00e9\ud83d\ude00"],
                          "b": {}, "c": [], "a": "last"} )");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v.value().kind, JsonValue::Kind::kObject);
  ASSERT_EQ(v.value().members.size(), 4u);
  const JsonValue& list = v.value().members[0].second;
  ASSERT_EQ(list.items.size(), 6u);
  EXPECT_EQ(list.items[1].text, "-2.5e3");
  EXPECT_EQ(list.items[2].kind, JsonValue::Kind::kBool);
  EXPECT_EQ(list.items[4].kind, JsonValue::Kind::kNull);
  EXPECT_EQ(list.items[5].text, "x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.value().Member("a")->text, "last");  // the last of a repeated name
  EXPECT_EQ(v.value().Member("missing"), nullptr);
  EXPECT_EQ(ParseJson("\"\\ud800x\"").value().text, "\xef\xbf\xbdx");  // a lone surrogate
}

TEST(Json, MalformedTextsSayWhereAndWhat) {
  ExpectError(ParseJson("").status(), "not JSON: a value expected at character 1");
  ExpectError(ParseJson("[1,]").status(), "a value expected at character 4");
  ExpectError(ParseJson("{\"a\" 1}").status(), "':' expected");
  ExpectError(ParseJson("[1 2]").status(), "',' or ']' expected");
  ExpectError(ParseJson("\"abc").status(), "an unterminated string");
  ExpectError(ParseJson("\"a\\qb\"").status(), "an unknown escape");
  ExpectError(ParseJson("\"a\nb\"").status(), "a control character");
  ExpectError(ParseJson("01").status(), "text after the end of the value");
  ExpectError(ParseJson("-").status(), "a digit expected");
  ExpectError(ParseJson("1.e5").status(), "a digit expected");
  ExpectError(ParseJson("[] x").status(), "text after the end of the value at character 4");
  ExpectError(ParseJson(std::string(65, '[') + std::string(65, ']')).status(),
              "more than 64 levels of nesting");
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']')).ok());
}

TEST(SageMaker, HostListsAndResourceConfig) {
  EXPECT_EQ(ParseSageMakerHostList(R"(["algo-1","algo-2"])").value(),
            (std::vector<std::string>{"algo-1", "algo-2"}));
  ExpectError(ParseSageMakerHostList("algo-1,algo-2").status(), "SM_HOSTS: not JSON");
  ExpectError(ParseSageMakerHostList(R"({"hosts": []})").status(),
              "SM_HOSTS: expected a list of host names such as [\"algo-1\",\"algo-2\"]");
  ExpectError(ParseSageMakerHostList("[]").status(), "SM_HOSTS lists no hosts");
  ExpectError(ParseSageMakerHostList(R"(["a", 2])").status(), "expected a list of host names");
  ExpectError(ParseSageMakerHostList(R"(["a b"])").status(), "'a b' is not a valid host name");
  ExpectError(ParseSageMakerHostList(R"(["a","a"])").status(), "host 'a' is listed twice");
  auto config = ParseSageMakerResourceConfig(PodFiles(kSageMakerResourceConfig).value());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config.value().current_host, "algo-1");
  EXPECT_EQ(config.value().hosts, (std::vector<std::string>{"algo-1", "algo-2"}));
  ExpectError(ParseSageMakerResourceConfig("[]").status(), "expected an object");
  ExpectError(ParseSageMakerResourceConfig("{}").status(), "no \"hosts\" list");
  ExpectError(ParseSageMakerResourceConfig(R"({"hosts": ["a"], "current_host": 1})").status(),
              "\"current_host\" is not a string");
}

TEST(SageMaker, TheJobsHostsWithTheirGpusOrCpus) {
  const Env gpus = {{"SM_HOSTS", R"(["algo-1","algo-2"])"},
                    {"SM_CURRENT_HOST", "algo-1"},
                    {"SM_NUM_GPUS", "8"},
                    {"SM_NUM_CPUS", "96"}};
  auto a = ResolveHosts("", "", gpus, 0, 2, PodFiles);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a.value().source, "SageMaker");
  EXPECT_EQ(a.value().hosts, (H{{"algo-1", 8}, {"algo-2", 8}}));
  EXPECT_TRUE(a.value().started_for_job);
  Env cpus = gpus;
  cpus["SM_NUM_GPUS"] = "0";
  EXPECT_EQ(ResolveHosts("", "", cpus, 0, 2, PodFiles).value().hosts,
            (H{{"algo-1", 96}, {"algo-2", 96}}));
  // Without the training toolkit's variables: the platform's file.
  a = ResolveHosts("", "", {{"TRAINING_JOB_ARN", "arn:aws:sagemaker:x"}, {"SM_NUM_CPUS", "4"}}, 0,
                   2, PodFiles);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a.value().hosts, (H{{"algo-1", 4}, {"algo-2", 4}}));
  ExpectError(ResolveHosts("", "", {{"TRAINING_JOB_ARN", "arn"}}, 0, 2, PodFiles).status(),
              "SageMaker: SM_NUM_GPUS and SM_NUM_CPUS are unset, so kolorun cannot tell how many "
              "ranks each host takes");
  // One host of unknown size is this machine, as outside SageMaker.
  EXPECT_EQ(ResolveHosts("", "", {{"SM_HOSTS", R"(["algo-1"])"}}, 3, 2, PodFiles).value().hosts,
            (H{{"algo-1", 3}}));
  cpus["SM_NUM_CPUS"] = "many";
  ExpectError(ResolveHosts("", "", cpus, 0, 2, PodFiles).status(),
              "SM_NUM_CPUS='many' is not a whole number of devices");
  // -H wins, and a scheduler comes first.
  EXPECT_EQ(ResolveHosts("x:1", "", gpus, 0, 2, PodFiles).value().source, "-H");
  Env slurm = gpus;
  slurm["SLURM_JOB_NODELIST"] = "n1";
  EXPECT_EQ(ResolveHosts("", "", slurm, 0, 2, PodFiles).value().source, "Slurm");
}

TEST(SageMaker, KolorunLaunchesFromTheFirstHostOnly) {
  const Env second = {
      {"SM_HOSTS", R"(["algo-1","algo-2"])"}, {"SM_CURRENT_HOST", "algo-2"}, {"SM_NUM_GPUS", "1"}};
  ExpectError(ResolveHosts("", "", second, 0, 2, PodFiles).status(),
              "SageMaker: this is algo-2, and kolorun launches the job from the first host, "
              "algo-1: run kolorun there only");
  Env stranger = second;
  stranger["SM_CURRENT_HOST"] = "algo-9";
  ExpectError(ResolveHosts("", "", stranger, 0, 2, PodFiles).status(),
              "SageMaker: this host, algo-9, is not one of the job's hosts (algo-1, ...)");
}

TEST(Clouds, TheOrderOfSourcesAndWhereSshStartsLate) {
  // A launcher pod's hostfile comes before SageMaker's variables (no machine has both).
  Env both = {{"K_MPI_JOB_ROLE", "launcher"}, {"SM_HOSTS", R"(["algo-1"])"}};
  EXPECT_EQ(ResolveHosts("", "", both, 0, 2, PodFiles).value().source,
            "MPI Operator (/etc/mpi/hostfile)");
  both["LSB_MCPU_HOSTS"] = "hA 2";
  EXPECT_EQ(ResolveHosts("", "", both, 0, 2, PodFiles).value().source, "LSF");
  EXPECT_TRUE(HostsStartWithTheJob({{"K_MPI_JOB_ROLE", "launcher"}}));
  EXPECT_TRUE(HostsStartWithTheJob({{"SM_CURRENT_HOST", "algo-1"}}));
  EXPECT_FALSE(HostsStartWithTheJob({{"K_MPI_JOB_ROLE", "worker"}}));
  EXPECT_FALSE(HostsStartWithTheJob({{"OMPI_MCA_orte_default_hostfile", "/h"}}));
}

TEST(Kolorun, SshWaitFromTheFlagOrKoloSshWait) {
  Options o;
  EXPECT_TRUE(ApplySshWaitVariable({{"KOLO_SSH_WAIT", "2.5"}}, &o).ok());
  EXPECT_EQ(o.ssh_wait, 2.5);
  Options given;
  given.ssh_wait = 0;  // --ssh-wait 0 wins
  EXPECT_TRUE(ApplySshWaitVariable({{"KOLO_SSH_WAIT", "60"}}, &given).ok());
  EXPECT_EQ(given.ssh_wait, 0);
  for (const char* bad : {"soon", "-1", "", "1e9", "nan"}) {
    Options b;
    ExpectError(
        ApplySshWaitVariable({{"KOLO_SSH_WAIT", bad}}, &b),
        "KOLO_SSH_WAIT='" + std::string(bad) + "' is not a number of seconds from 0 to 86400");
  }
}

}  // namespace
}  // namespace kolo::launcher
