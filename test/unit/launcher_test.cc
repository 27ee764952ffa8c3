#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "command.h"
#include "expect_error.h"
#include "hosts.h"
#include "options.h"
#include "program_check.h"
#include "usage.h"

namespace kolo::launcher {
namespace {

using H = std::vector<HostSlots>;

TEST(HostSpec, GoodAndBad) {
  EXPECT_EQ(ParseHostSpec("a:2,b:2").value(), (H{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(ParseHostSpec("node1,127.0.0.2:4").value(), (H{{"node1", 1}, {"127.0.0.2", 4}}));
  ExpectError(ParseHostSpec("").status(), "empty");
  ExpectError(ParseHostSpec("a:2,,b").status(), "empty entry");
  ExpectError(ParseHostSpec("a:0").status(), "at least 1");
  ExpectError(ParseHostSpec("a:x").status(), "not a positive whole number");
  ExpectError(ParseHostSpec("a:99999999").status(), "is more than 1048576");  // found by fuzzing
  ExpectError(ParseHostSpec("a:2,a:3").status(), "listed twice");
  ExpectError(ParseHostSpec("a b:2").status(), "not a valid host name");
}

TEST(Hostfile, OpenMpiDeepSpeedStyle) {
  auto h = ParseHostfile("# cluster\nnode1 slots=4\n\n  node2 slots=2 # gpu box\nnode3\n");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value(), (H{{"node1", 4}, {"node2", 2}, {"node3", 1}}));
  ExpectError(ParseHostfile("node1 slots=4\nnode1 slots=2\n").status(), "listed twice");
  ExpectError(ParseHostfile("node1 slots=four\n").status(), "line 1");
  ExpectError(ParseHostfile("a slots=1\nnode1 cores=4\n").status(),
              "line 2: expected 'host slots=N'");
  ExpectError(ParseHostfile("# nothing\n\n").status(), "no hosts");
}

TEST(Slurm, Nodelists) {
  EXPECT_EQ(ExpandSlurmNodelist("gpu[01-04,07],login1").value(),
            (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"}));
  EXPECT_EQ(ExpandSlurmNodelist("n[8-10]").value(), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(ExpandSlurmNodelist("a,b").value(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ExpandSlurmNodelist("rack[1-2]-gpu").value(),
            (std::vector<std::string>{"rack1-gpu", "rack2-gpu"}));
  ExpectError(ExpandSlurmNodelist("gpu[01-04").status(), "unbalanced");
  ExpectError(ExpandSlurmNodelist("gpu[4-1]").status(), "bad range");
  ExpectError(ExpandSlurmNodelist("gpu[a-b]").status(), "bad range");
  ExpectError(ExpandSlurmNodelist("a,,b").status(), "empty entry");
}

TEST(Slurm, TasksPerNode) {
  EXPECT_EQ(ParseSlurmTasksPerNode("2(x3),1").value(), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(ParseSlurmTasksPerNode("4").value(), (std::vector<int>{4}));
  ExpectError(ParseSlurmTasksPerNode("2(x3").status(), "bad entry");
  ExpectError(ParseSlurmTasksPerNode("0").status(), "at least 1");
}

TEST(Schedulers, PbsSgeLsf) {
  EXPECT_EQ(ParsePbsNodefile("a\na\nb\n").value(), (H{{"a", 2}, {"b", 1}}));
  ExpectError(ParsePbsNodefile("\n").status(), "no hosts");
  EXPECT_EQ(
      ParseSgeHostfile("hostA 4 all.q@hostA UNDEFINED\nhostB 2 all.q@hostB UNDEFINED\n").value(),
      (H{{"hostA", 4}, {"hostB", 2}}));
  ExpectError(ParseSgeHostfile("hostA\n").status(), "line 1");
  EXPECT_EQ(ParseLsfMcpuHosts("hA 2 hB 1").value(), (H{{"hA", 2}, {"hB", 1}}));
  ExpectError(ParseLsfMcpuHosts("hA 2 hB").status(), "pairs");
}

// A host named twice is one host with the slots added up, whichever scheduler
// lists it: one node rank and one set of local ranks per machine.
TEST(Schedulers, RepeatedHostsAreMerged) {
  EXPECT_EQ(ParseSgeHostfile("hA 2 a.q@hA UNDEFINED\nhB 1 a.q@hB UNDEFINED\n"
                             "hA 3 b.q@hA UNDEFINED\n")
                .value(),
            (H{{"hA", 5}, {"hB", 1}}));
  EXPECT_EQ(ParseLsfMcpuHosts("hA 2 hB 1 hA 1").value(), (H{{"hA", 3}, {"hB", 1}}));
  auto slurm =
      ResolveHosts("", "", {{"SLURM_JOB_NODELIST", "n[1-2],n1"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}},
                   0, 2, nullptr);
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm.value().hosts, (H{{"n1", 4}, {"n2", 2}}));
  auto placed = PlaceRanks(slurm.value(), 6);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed.value(), (H{{"n1", 4}, {"n2", 2}}));
}

Result<std::string> FakeRead(const std::string& path) {
  if (path == "/pbs") return std::string("n1\nn1\nn2\n");
  if (path == "/hosts") return std::string("x slots=2\n");
  return Status::InvalidArgument("cannot read '" + path + "'");
}

TEST(ResolveHosts, OrderOfSources) {
  std::map<std::string, std::string> slurm = {{"SLURM_JOB_NODELIST", "n[1-2]"},
                                              {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                              {"PBS_NODEFILE", "/pbs"}};
  auto a = ResolveHosts("h:3", "", slurm, 0, 2, FakeRead);
  EXPECT_EQ(a.value().source, "-H");
  a = ResolveHosts("", "/hosts", slurm, 0, 2, FakeRead);
  EXPECT_EQ(a.value().hosts, (H{{"x", 2}}));
  a = ResolveHosts("", "", slurm, 0, 2, FakeRead);
  EXPECT_EQ(a.value().source, "Slurm");
  EXPECT_EQ(a.value().hosts, (H{{"n1", 2}, {"n2", 2}}));
  slurm.erase("SLURM_JOB_NODELIST");
  a = ResolveHosts("", "", slurm, 0, 2, FakeRead);
  EXPECT_EQ(a.value().source, "PBS");
  EXPECT_EQ(a.value().hosts, (H{{"n1", 2}, {"n2", 1}}));
  a = ResolveHosts("", "", {{"LSB_MCPU_HOSTS", "a 1 b 2"}}, 0, 2, FakeRead);
  EXPECT_EQ(a.value().source, "LSF");
  a = ResolveHosts("", "", {}, 3, 2, FakeRead);
  EXPECT_EQ(a.value().hosts, (H{{"localhost", 3}}));
  ExpectError(ResolveHosts("a", "/hosts", {}, 0, 2, FakeRead).status(), "cannot be used together");
  ExpectError(ResolveHosts("", "/missing", {}, 0, 2, FakeRead).status(), "cannot read '/missing'");
  ExpectError(ResolveHosts("", "", {{"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_TASKS_PER_NODE", "1"}},
                           0, 2, FakeRead)
                  .status(),
              "gives 1 counts but SLURM_JOB_NODELIST has 2");
}

TEST(MapBySlot, FillsHostsInOrder) {
  EXPECT_EQ(MapBySlot({{"a", 2}, {"b", 2}}, 3), (std::vector<int>{0, 0, 1}));
}

TEST(PlaceRanks, HostsThatGetRanksAndTheSlotChecks) {
  const Allocation two{"-H", {{"a", 2}, {"b", 2}}, false, ""};
  EXPECT_EQ(PlaceRanks(two, 3).value(), (H{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(PlaceRanks(two, 0).value(), (H{{"a", 2}, {"b", 2}}));  // 0: every slot
  ExpectError(PlaceRanks(two, 5).status(),
              "-np 5 asks for more ranks than the 4 slots that -H provides");
  ExpectError(PlaceRanks({"--hostfile h", {{"a", kMaxSlots}, {"b", 1}}, false, ""}, 0).status(),
              "--hostfile h provides more than 1048576 slots");
}

TEST(Command, HorovodLikeLineForTwoHosts) {
  LaunchPlan p;
  p.np = 4;
  p.hosts = {{"a", 2}, {"b", 2}};
  p.as_root = true;
  p.env = {{"KOLO_FUSION_THRESHOLD", "1"}, {"PATH", "/bin"}};
  p.rank_exec = "/opt/kolo/bin/kolo-rank";
  p.command = {"python", "train.py", "--lr", "0.1"};
  std::vector<std::string> want = {"mpirun",
                                   "--allow-run-as-root",
                                   "--tag-output",
                                   "-np",
                                   "4",
                                   "-H",
                                   "a:2,b:2",
                                   "--bind-to",
                                   "none",
                                   "--map-by",
                                   "slot",
                                   "--mca",
                                   "pml",
                                   "ob1",
                                   "--mca",
                                   "btl",
                                   "self,vader,tcp",
                                   "-x",
                                   "KOLO_FUSION_THRESHOLD",
                                   "-x",
                                   "PATH",
                                   "/opt/kolo/bin/kolo-rank",
                                   "python",
                                   "train.py",
                                   "--lr",
                                   "0.1"};
  EXPECT_EQ(BuildMpirunCommand(p), want);
}

TEST(Command, SshInterfacesOversubscribeAndExtraArgs) {
  LaunchPlan p;
  p.np = 2;
  p.hosts = {{"localhost", 2}};
  p.oversubscribe = true;
  p.binding = "core";
  p.ssh_port = 2222;
  p.ssh_identity_file = "/k/id";
  p.network_interfaces = {"eth0", "ib0"};
  p.extra_mpi_args = {"--mca", "foo", "bar"};
  p.command = {"prog"};
  std::vector<std::string> want = {"mpirun",
                                   "--tag-output",
                                   "-np",
                                   "2",
                                   "-H",
                                   "localhost:2",
                                   "--bind-to",
                                   "core",
                                   "--map-by",
                                   "slot",
                                   "--oversubscribe",
                                   "--mca",
                                   "mpi_yield_when_idle",
                                   "1",
                                   "--mca",
                                   "pml",
                                   "ob1",
                                   "--mca",
                                   "btl",
                                   "self,vader,tcp",
                                   "--mca",
                                   "btl_tcp_if_include",
                                   "eth0,ib0",
                                   "--mca",
                                   "oob_tcp_if_include",
                                   "eth0,ib0",
                                   "--mca",
                                   "plm_rsh_args",
                                   "-p 2222 -i /k/id",
                                   "--mca",
                                   "foo",
                                   "bar",
                                   "prog"};
  EXPECT_EQ(BuildMpirunCommand(p), want);
}

TEST(Command, OneHostUsesNoTcpAndLoopbackAcrossHostsTheJobsInterface) {
  LaunchPlan one;
  one.hosts = {{"localhost", 2}};
  one.single_host = true;
  one.network_interfaces = {"eth0"};  // no TCP transport to bind
  one.bind_library = "/k/libkolo_bind.so";
  std::vector<std::string> argv = BuildMpirunCommand(one);
  std::string line = ShellQuote(argv);
  EXPECT_NE(line.find("--mca pml ob1 --mca btl self,vader --mca oob_tcp_if_include lo"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("eth0"), std::string::npos) << line;
  EXPECT_EQ(line.find("orte_launch_agent"), std::string::npos) << line;

  LaunchPlan two;
  two.hosts = {{"a", 1}, {"b", 1}};
  two.network_interfaces = {"eth1"};
  two.bind_library = "/k/libkolo_bind.so";
  line = ShellQuote(BuildMpirunCommand(two));
  EXPECT_NE(line.find("--mca btl self,vader,tcp --mca btl_tcp_if_include eth1 --mca "
                      "oob_tcp_if_include eth1 --mca orte_launch_agent 'env "
                      "LD_PRELOAD=/k/libkolo_bind.so KOLORUN_BIND_INTERFACES=eth1 orted'"),
            std::string::npos)
      << line;
  // A launch agent of the user's own is left alone.
  two.extra_mpi_args = {"--mca", "orte_launch_agent", "/opt/ompi/bin/orted"};
  line = ShellQuote(BuildMpirunCommand(two));
  EXPECT_EQ(line.find("LD_PRELOAD"), std::string::npos) << line;
}

TEST(Command, AnElasticIncarnationEndsAtOnceUnlessTheUserSaysOtherwise) {
  LaunchPlan p;
  p.hosts = {{"localhost", 2}};
  EXPECT_EQ(ShellQuote(BuildMpirunCommand(p)).find("odls_base_sigkill_timeout"), std::string::npos);
  p.elastic = true;
  EXPECT_NE(ShellQuote(BuildMpirunCommand(p)).find("--mca odls_base_sigkill_timeout 0"),
            std::string::npos);
  // mpirun refuses a parameter given twice: the user's alone.
  p.extra_mpi_args = {"--mca", "odls_base_sigkill_timeout", "2"};
  const std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_EQ(line.find("odls_base_sigkill_timeout 0"), std::string::npos) << line;
  EXPECT_NE(line.find("odls_base_sigkill_timeout 2"), std::string::npos) << line;
}

TEST(Command, InPlaceElasticTurnsOnFaultToleranceAndOffHanOnOpenMpi5) {
  LaunchPlan p;
  p.hosts = {{"localhost", 2}};
  p.elastic = p.fault_tolerant = true;
  // Open MPI 4.1 has no fault tolerance: nothing is added (kolorun restarts instead).
  EXPECT_EQ(ShellQuote(BuildMpirunCommand(p)).find("--with-ft"), std::string::npos);
  p.dialect = MpiDialect::kPrrte;
  std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--with-ft ulfm --mca coll ^han"), std::string::npos) << line;
  // New processes started in place share the hosts with the dead ranks' slots.
  EXPECT_NE(line.find("--map-by slot:OVERSUBSCRIBE"), std::string::npos) << line;
  EXPECT_EQ(line.find("mpi_yield_when_idle"), std::string::npos) << line;
  // A coll choice of the user's own is left alone (mpirun refuses a parameter twice).
  p.extra_mpi_args = {"--mca", "coll", "^tuned"};
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_EQ(line.find("^han"), std::string::npos) << line;
  EXPECT_NE(line.find("--with-ft ulfm"), std::string::npos) << line;
}

TEST(Command, ManyHostsDisableTreeSpawn) {
  LaunchPlan p;
  for (int i = 0; i < 64; ++i) p.hosts.push_back({"h" + std::to_string(i), 1});
  auto argv = BuildMpirunCommand(p);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "plm_rsh_no_tree_spawn"), argv.end());
}

TEST(Command, SplitArgsAndQuote) {
  EXPECT_EQ(SplitArgs("--mca btl_tcp_if_include 'eth 0' \"x y\"").value(),
            (std::vector<std::string>{"--mca", "btl_tcp_if_include", "eth 0", "x y"}));
  ExpectError(SplitArgs("'open").status(), "unterminated");
  EXPECT_EQ(ShellQuote({"a", "b c", "it's"}), "a 'b c' 'it'\\''s'");
}

TEST(Command, ForwardedNames) {
  std::map<std::string, std::string> env = {{"KOLO_X", "1"},
                                            {"HOROVOD_CYCLE_TIME", "2"},
                                            {"NCCL_DEBUG", "INFO"},
                                            {"PATH", "/bin"},
                                            {"HOME", "/root"}};
  EXPECT_EQ(
      ForwardedNames(env, {"MY_VAR", "PATH"}),
      (std::vector<std::string>{"HOROVOD_CYCLE_TIME", "KOLO_X", "NCCL_DEBUG", "PATH", "MY_VAR"}));
}

using Args = std::vector<std::string>;

// kolorun's options that take a value, as kolorun's main() collects them.
const std::set<std::string> kValueOptions = {"--np",       "-H",          "--hosts",        "-x",
                                             "--mpi-args", "--log-level", "--start-timeout"};

TEST(Horovodrun, FlagsBecomeKolorunsAndTheCommandIsLeftAlone) {
  Result<TranslatedArgs> t = TranslateHorovodrunArgs(
      {"-np", "4", "-H", "a:2,b:2", "--network-interfaces", "eth0,ib0", "-cb", "--tcp",
       "--no-hierarchical-allreduce", "--stall-check", "--log-level", "-v", "python", "train.py",
       "-np", "8", "--gloo", "-v"},
      kValueOptions);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // "--log-level -v": a value that looks like a flag is still the value.
  EXPECT_EQ(t.value().args, (Args{"--np",
                                  "4",
                                  "-H",
                                  "a:2,b:2",
                                  "--network-interface",
                                  "eth0",
                                  "--network-interface",
                                  "ib0",
                                  "--check-build",
                                  "-x",
                                  "NCCL_IB_DISABLE=1",
                                  "-x",
                                  "KOLO_HIERARCHICAL_ALLREDUCE=0",
                                  "-x",
                                  "KOLO_STALL_CHECK_DISABLE=0",
                                  "--log-level",
                                  "-v",
                                  "python",
                                  "train.py",
                                  "-np",
                                  "8",
                                  "--gloo",
                                  "-v"}));
  EXPECT_TRUE(t.value().notes.empty());
}

TEST(Horovodrun, AfterDoubleDashNothingIsTranslated) {
  Result<TranslatedArgs> t =
      TranslateHorovodrunArgs({"--num-proc=2", "--", "-np", "3", "--gloo"}, kValueOptions);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t.value().args, (Args{"--np", "2", "--", "-np", "3", "--gloo"}));
}

TEST(Horovodrun, IgnoredFlagsTakeTheirValuesAndLeaveANote) {
  Result<TranslatedArgs> t = TranslateHorovodrunArgs(
      {"--disable-cache", "--num-nccl-streams", "2", "--thread-affinity=1", "--mpi", "prog"},
      kValueOptions);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t.value().args, (Args{"prog"}));
  ASSERT_EQ(t.value().notes.size(), 4u);
  EXPECT_EQ(t.value().notes[0].rfind("--disable-cache is accepted and ignored: ", 0), 0u)
      << t.value().notes[0];
  EXPECT_NE(t.value().notes[1].find("--num-nccl-streams"), std::string::npos);
  ExpectError(TranslateHorovodrunArgs({"--num-nccl-streams"}, kValueOptions).status(),
              "--num-nccl-streams expects 1 value(s)");
}

TEST(Horovodrun, RefusedFlagsNameTheFlagAndTheKolorunWay) {
  struct Case {
    Args args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--gloo", "prog"}, "--gloo is not supported: kolo runs on MPI; drop --gloo"},
           {{"--config-file", "c.yaml", "prog"}, "does not read horovodrun's YAML file"},
           {{"--binding-args=--rankfile r", "prog"}, "use --binding"},
           {{"--jsrun", "prog"}, "drop --jsrun"}}) {
    ExpectError(TranslateHorovodrunArgs(c.args, kValueOptions).status(), c.want);
  }
}

// Reads a kolorun command line ("kolorun" first) as kolorun's main() does.
std::optional<int> Parse(Args args, Options* o) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data(), o);
}

TEST(Usage, TheNearestKnownNameOrNone) {
  const Args known = {"--np",
                      "-np",
                      "-H",
                      "-h",
                      "--help",
                      "--hostfile",
                      "--verbose",
                      "--hierarchical-allreduce",
                      "--network-interface"};
  EXPECT_EQ(NearestName("--hostfle", known), "--hostfile");
  EXPECT_EQ(NearestName("--verbsoe=1", known), "--verbose");  // the part before '='
  EXPECT_EQ(NearestName("-n", known), "-np");                 // a beginning beats one edit
  EXPECT_EQ(NearestName("--hierarchical", known), "--hierarchical-allreduce");
  EXPECT_EQ(NearestName("--tcp-port", known), "");  // too far to be a typo
  EXPECT_EQ(NearestName("--bogus", known), "");
  EXPECT_TRUE(LooksLikeOption("--bogus") && LooksLikeOption("-n") && LooksLikeOption("--a=1"));
  EXPECT_FALSE(LooksLikeOption("-") || LooksLikeOption("--") || LooksLikeOption("python"));
  EXPECT_EQ(UnknownOptionMessage("--hostfle=h", known)
                .rfind("unknown option '--hostfle'; did you mean '--hostfile'? (kolorun --help", 0),
            0u);
}

TEST(Kolorun, UnknownOptionsAndBadValuesStopWithExitCode2) {
  for (const Args& args : std::vector<Args>{{"kolorun", "-np", "2", "--bogus", "/bin/true"},
                                            {"kolorun", "--hostfle", "h", "prog"},
                                            {"kolorun", "-np", "0", "prog"},
                                            {"kolorun", "--np"},
                                            {"kolorun", "--binding", "tight", "prog"}}) {
    Options o;
    EXPECT_EQ(Parse(args, &o), 2) << args[args.size() - 2];
  }
  Options help;
  EXPECT_EQ(Parse({"kolorun", "--help"}, &help), 0);
}

TEST(Kolorun, ElasticFlagsInKolorunsAndHorovodrunsSpellings) {
  Options o;
  ASSERT_EQ(Parse({"kolorun",
                   "-np",
                   "4",
                   "--min-num-proc",
                   "2",
                   "--max-num-proc",
                   "8",
                   "--blacklist-cooldown-range",
                   "10",
                   "100",
                   "-H",
                   "a:2,b:2",
                   "--reset-limit",
                   "3",
                   "--elastic-timeout",
                   "60",
                   "python",
                   "train.py",
                   "--min-np",
                   "1"},
                  &o),
            std::nullopt);
  EXPECT_TRUE(o.Elastic());
  EXPECT_TRUE(o.np_given);
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.min_np, 2);
  EXPECT_EQ(o.max_np, 8);
  EXPECT_EQ(o.cooldown_range, (std::vector<int>{10, 100}));
  EXPECT_EQ(o.hosts, "a:2,b:2") << "the flag after the two values is still read";
  EXPECT_EQ(o.reset_limit, 3);
  EXPECT_EQ(o.elastic_timeout, 60);
  EXPECT_TRUE(o.elastic_timeout_given);
  EXPECT_EQ(o.command, (Args{"python", "train.py", "--min-np", "1"}));
  Options discovery;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "--host-discovery-script", "./d.sh", "--slots-per-host",
                   "4", "prog"},
                  &discovery),
            std::nullopt);
  EXPECT_TRUE(discovery.Elastic());
  EXPECT_EQ(discovery.discovery_script, "./d.sh");
  EXPECT_EQ(discovery.slots_per_host, 4);
  Options fixed;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "prog"}, &fixed), std::nullopt);
  EXPECT_FALSE(fixed.Elastic());
  // The elastic settings without elastic mode: refused, naming the flag.
  for (const Args& args :
       std::vector<Args>{{"kolorun", "-np", "2", "--reset-limit", "1", "prog"},
                         {"kolorun", "--elastic-timeout", "5", "prog"},
                         {"kolorun", "--slots-per-host", "2", "prog"},
                         {"kolorun", "--blacklist-cooldown-range", "1", "2", "prog"},
                         {"kolorun", "--min-np", "0", "prog"}}) {
    Options bad;
    EXPECT_EQ(Parse(args, &bad), 2) << args[1];
  }
}

TEST(Kolorun, OptionsAfterTheProgramOrAfterDoubleDashAreThePrograms) {
  Options o;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "python", "train.py", "--lr", "1", "--bogus"}, &o),
            std::nullopt);
  EXPECT_EQ(o.command, (Args{"python", "train.py", "--lr", "1", "--bogus"}));
  Options dashed;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "--", "--odd-program-name", "-v"}, &dashed),
            std::nullopt);
  EXPECT_EQ(dashed.command, (Args{"--odd-program-name", "-v"}));
}

TEST(Kolorun, AutotuneFlagsSetTheAutotuneVariables) {
  Options o;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "--autotune", "--autotune-log-file", "/tmp/at.csv",
                   "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "5",
                   "--autotune-file=/tmp/tuned.env", "python", "train.py", "--autotune"},
                  &o),
            std::nullopt);
  EXPECT_EQ(o.command, (Args{"python", "train.py", "--autotune"}));  // the program's own flag
  std::map<std::string, std::string> s = RuntimeSettings(o);
  EXPECT_EQ(s["KOLO_AUTOTUNE"], "1");
  EXPECT_EQ(s["KOLO_AUTOTUNE_LOG"], "/tmp/at.csv");
  EXPECT_EQ(s["KOLO_AUTOTUNE_WARMUP_SAMPLES"], "1");
  EXPECT_EQ(s["KOLO_AUTOTUNE_STEPS_PER_SAMPLE"], "5");
  EXPECT_EQ(s["KOLO_AUTOTUNE_FILE"], "/tmp/tuned.env");

  // Without the flags nothing is set: the ranks' environment decides.
  Options plain;
  ASSERT_EQ(Parse({"kolorun", "-np", "2", "prog"}, &plain), std::nullopt);
  for (const auto& [name, value] : RuntimeSettings(plain)) {
    EXPECT_EQ(name.rfind("KOLO_AUTOTUNE", 0), std::string::npos) << name << "=" << value;
  }
  // A sample of no steps is refused before anything starts.
  Options bad;
  EXPECT_NE(Parse({"kolorun", "--autotune-steps-per-sample", "0", "prog"}, &bad), std::nullopt);
}

TEST(Horovodrun, AutotuneFlags) {
  // horovodrun's own --autotune flags are kolorun's; the Bayesian ones are
  // accepted with a note, and --no-autotune turns autotune off.
  Result<TranslatedArgs> t = TranslateHorovodrunArgs(
      {"--autotune", "--autotune-log-file", "a.csv", "--autotune-bayes-opt-max-samples", "40",
       "--autotune-gaussian-process-noise=0.75", "--no-autotune", "prog"},
      {"--autotune-log-file"});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t.value().args,
            (Args{"--autotune", "--autotune-log-file", "a.csv", "-x", "KOLO_AUTOTUNE=0", "prog"}));
  ASSERT_EQ(t.value().notes.size(), 2u);
  EXPECT_EQ(t.value().notes[0],
            "--autotune-bayes-opt-max-samples is accepted and ignored: kolo's autotune is a "
            "coordinate search over a few values per setting, not Bayesian optimization "
            "(docs/configuration.md, \"Autotune\")");
  EXPECT_NE(t.value().notes[1].find("--autotune-gaussian-process-noise is accepted and ignored"),
            std::string::npos);
}

TEST(Horovodrun, EveryFlagIsInTheLauncherDocs) {
  std::ifstream f(KOLO_SOURCE_DIR "/docs/launcher.md");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  for (const HorovodrunFlag& flag : HorovodrunFlags()) {
    EXPECT_NE(ss.str().find(std::string("`") + flag.name + "`"), std::string::npos)
        << flag.name << " is missing from the horovodrun table of docs/launcher.md";
  }
}

}  // namespace
}  // namespace kolo::launcher

#include "output.h"

namespace kolo::launcher {
namespace {

std::vector<std::string> Render(const std::vector<OutputLine>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) {
    out.push_back(std::to_string(l.rank) + (l.is_stderr ? "E:" : ":") + l.text);
  }
  return out;
}

TEST(Output, FragmentsBecomeWholeLinesPerRank) {
  OutputAssembler a;
  // An unbuffered print("ENV", 1) on two ranks, interleaved write by write.
  std::vector<std::string> lines = Render(
      a.Feed("[1,1]<stdout>:ENV[1,0]<stdout>:ENV[1,1]<stdout>: [1,1]<stdout>:1[1,0]<stdout>: "
             "[1,1]<stdout>:\n[1,0]<stdout>:0[1,0]<stdout>:\n",
             false));
  EXPECT_EQ(lines, (std::vector<std::string>{"1:ENV 1", "0:ENV 0"}));
}

TEST(Output, TagsCutBetweenReadsAndStderr) {
  OutputAssembler a;
  EXPECT_TRUE(a.Feed("[1,0]<std", true).empty());
  EXPECT_TRUE(a.Feed("err>:Traceback (most", true).empty());
  auto lines = Render(a.Feed(" recent call last):\n", true));
  EXPECT_EQ(lines, (std::vector<std::string>{"0E:Traceback (most recent call last):"}));
}

TEST(Output, UntaggedMpirunLinesAndFlush) {
  OutputAssembler a;
  auto lines = Render(a.Feed("mpirun noticed something\n[1,2]<stdout>:partial", false));
  EXPECT_EQ(lines, (std::vector<std::string>{"-1:mpirun noticed something"}));
  EXPECT_EQ(Render(a.Flush()), (std::vector<std::string>{"2:partial"}));
}

TEST(Output, BracketsInUserTextAreNotTags) {
  OutputAssembler a;
  auto lines = Render(a.Feed("[1,0]<stdout>:list [1, 2] and [3,4]x\n", false));
  EXPECT_EQ(lines, (std::vector<std::string>{"0:list [1, 2] and [3,4]x"}));
}

TEST(Output, RankExitMarker) {
  RankExit e;
  ASSERT_TRUE(ParseRankExit("KOLORUN-RANK-EXIT rank=3 host=node2 code=7", &e));
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.host, "node2");
  EXPECT_EQ(e.code, 7);
  ASSERT_TRUE(ParseRankExit("KOLORUN-RANK-EXIT rank=1 host=h signal=9", &e));
  EXPECT_EQ(e.signal, 9);
  EXPECT_FALSE(ParseRankExit("hello", &e));
}

}  // namespace
}  // namespace kolo::launcher

#include <boost/asio.hpp>
#include <thread>

#include "rendezvous.h"

namespace kolo::launcher {
namespace {

TEST(Rendezvous, ParseRegistration) {
  auto r = ParseRegistration("KOLO1 tok 3 1 node2 4242", "tok", 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value().rank, 3);
  EXPECT_EQ(r.value().local_rank, 1);
  EXPECT_EQ(r.value().host, "node2");
  EXPECT_EQ(r.value().pid, 4242);
  ExpectError(ParseRegistration("KOLO1 bad 3 1 node2 4242", "tok", 4).status(), "wrong job token");
  ExpectError(ParseRegistration("KOLO1 tok 4 1 node2 4242", "tok", 4).status(), "out of range");
  ExpectError(ParseRegistration("KOLO1 tok -1 1 node2 4242", "tok", 4).status(), "not a number");
  ExpectError(ParseRegistration("GET / HTTP/1.1", "tok", 4).status(), "malformed");
  ExpectError(ParseRegistration("", "tok", 4).status(), "malformed");
  Registration me{2, 0, "h", 7};
  EXPECT_EQ(RegistrationMessage("tok", me), "KOLO1 tok 2 0 h 7\n");
  EXPECT_EQ(NewToken().size(), 32u);
  EXPECT_NE(NewToken(), NewToken());
}

// Sends raw bytes to the server and returns its reply.
std::string SendRaw(int port, const std::string& bytes) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  boost::system::error_code ec;
  boost::asio::write(s, boost::asio::buffer(bytes), ec);
  std::string reply;
  boost::asio::read_until(s, boost::asio::dynamic_buffer(reply, 256), '\n', ec);
  return reply;
}

TEST(Rendezvous, ServerAcceptsRefusesAndDetectsDuplicates) {
  RendezvousServer server("secret", 2);
  Result<int> port = server.Start("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_TRUE(
      Register("127.0.0.1", port.value(), RegistrationMessage("secret", {0, 0, "a", 10}), 5).ok());
  Status wrong =
      Register("127.0.0.1", port.value(), RegistrationMessage("guess", {1, 0, "b", 11}), 5);
  ExpectError(wrong, "wrong job token");
  EXPECT_EQ(SendRaw(port.value(), std::string(2000, 'x')), "ERR bad message\n");
  EXPECT_EQ(SendRaw(port.value(), "KOLO1 secret 1 0 b\n").substr(0, 4), "ERR ");
  auto snap = server.Take();
  EXPECT_EQ(snap.registered.size(), 1u);
  EXPECT_TRUE(snap.fatal.empty());
  ASSERT_EQ(snap.notes.size(), 3u);
  EXPECT_NE(snap.notes[0].find("wrong job token"), std::string::npos) << snap.notes[0];
  EXPECT_NE(snap.notes[1].find("longer than 1024 bytes"), std::string::npos) << snap.notes[1];
  EXPECT_TRUE(server.Take().notes.empty());  // handed out once
  ExpectError(
      Register("127.0.0.1", port.value(), RegistrationMessage("secret", {0, 0, "c", 12}), 5),
      "already registered");
  snap = server.Take();
  EXPECT_NE(snap.fatal.find("two processes claim rank 0: pid 10 on host a and pid 12 on host c"),
            std::string::npos)
      << snap.fatal;
  server.Stop();
}

}  // namespace
}  // namespace kolo::launcher

namespace kolo::launcher {
namespace {

TEST(PinnedGpu, KeepsTheLocalRanksEntryOrTheLocalRankItself) {
  EXPECT_EQ(PinnedGpu("", 3).value(), "3");
  EXPECT_EQ(PinnedGpu("4,6", 0).value(), "4");
  EXPECT_EQ(PinnedGpu("4,6", 1).value(), "6");
  EXPECT_EQ(PinnedGpu("GPU-1a2b,GPU-3c4d", 1).value(), "GPU-3c4d");  // UUIDs pass through
  auto short_list = PinnedGpu("4,6", 2);
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find("local rank 2 has no GPU of its own"),
            std::string::npos)
      << short_list.status().message();
}

}  // namespace
}  // namespace kolo::launcher

namespace kolo::launcher {
namespace {

TEST(ProgramCheck, FoundAsExecvpWouldFindIt) {
  const std::string dir = ::testing::TempDir() + "/kolo_program_check";
  std::filesystem::create_directories(dir + "/bin");
  std::ofstream(dir + "/bin/tool") << "#!/bin/sh\n";
  std::ofstream(dir + "/notes.txt") << "text\n";
  chmod((dir + "/bin/tool").c_str(), 0755);
  EXPECT_EQ(LocalProgramState("tool", "/nonexistent:" + dir + "/bin", "/"), "");
  EXPECT_EQ(LocalProgramState("tool", "/usr/bin", "/"), "notfound");
  EXPECT_EQ(LocalProgramState("tool", "bin", dir), "");   // a relative PATH entry: from cwd
  EXPECT_EQ(LocalProgramState("bin/tool", "", dir), "");  // a path: as given, from cwd
  EXPECT_EQ(LocalProgramState(dir + "/notes.txt", "", "/"), "notexec");
  EXPECT_EQ(LocalProgramState(dir + "/bin", "", "/"), "isdir");
  EXPECT_EQ(LocalProgramState("./missing", "", dir), "missing");
  EXPECT_EQ(LocalProgramState("bin", dir, "/"), "notfound");  // a directory on PATH is not it
}

TEST(ProgramCheck, RemoteAnswersAndMessages) {
  std::vector<std::pair<ProgramState, std::string>> found;
  EXPECT_TRUE(ParseRemoteCheck("Welcome to node2\nnotfound train\nmissing /opt/k/kolo-rank\n" +
                                   std::string(kKolorunCheckDone) + "\n",
                               &found));
  EXPECT_EQ(found, (std::vector<std::pair<ProgramState, std::string>>{
                       {"notfound", "train"}, {"missing", "/opt/k/kolo-rank"}}));
  std::vector<std::pair<ProgramState, std::string>> cut;
  EXPECT_FALSE(ParseRemoteCheck("notfound train\n", &cut));  // no end mark: it did not finish

  ProgramCheck check{"/opt/k/kolo-rank", "train", "/usr/bin:/bin", "/home/u/job"};
  EXPECT_EQ(ProgramProblemMessage("node2", check, "notfound", "train"),
            "host 'node2': 'train' is not found on the ranks' PATH (/usr/bin:/bin); give its full "
            "path, or set the ranks' PATH with -x PATH=...");
  EXPECT_EQ(ProgramProblemMessage("node2", check, "missing", "/opt/k/kolo-rank"),
            "host 'node2': kolorun's helper '/opt/k/kolo-rank' does not exist; install kolo at "
            "the same path on every host");
  EXPECT_EQ(ProgramProblemMessage("node2", check, "missing", "./train.sh"),
            "host 'node2': './train.sh' does not exist (ranks start in /home/u/job there, else "
            "in the home directory)");
  // The check runs as POSIX sh whatever the login shell, with the values quoted.
  const std::string command = RemoteCheckCommand(check);
  EXPECT_EQ(command.rfind("sh -c '", 0), 0u) << command;
  EXPECT_NE(command.find("/home/u/job"), std::string::npos) << command;
}

TEST(ProgramCheck, RemoteShellIsSshOrTheAgentMpirunUses) {
  EXPECT_EQ(RemoteAgent({"--mca", "plm_rsh_agent", "/t/fake_ssh.sh -v"}, ""),
            (Args{"/t/fake_ssh.sh", "-v"}));
  EXPECT_EQ(RemoteAgent({"-mca", "btl", "tcp"}, "qrsh -inherit"), (Args{"qrsh", "-inherit"}));
  EXPECT_EQ(RemoteAgent({}, "ssh : rsh"), Args{});  // Open MPI's default: ssh
  EXPECT_EQ(RemoteShellArgv({}, "node2", 2222, "/k/id", "CMD", 5),
            (Args{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-p", "2222", "-i",
                  "/k/id", "node2", "CMD"}));
  EXPECT_EQ(RemoteShellArgv({"qrsh", "-inherit"}, "node2", 0, "", "CMD", 5),
            (Args{"qrsh", "-inherit", "node2", "CMD"}));
}

}  // namespace
}  // namespace kolo::launcher
