// kolorun on Hydra (MPICH, Intel MPI): who an mpirun is, the mpiexec command
// line, the variables Hydra and the ranks read, Hydra's tagged output and
// its messages. Pure functions; the words are the ones measured on MPICH
// 5.0.2 and Intel MPI 2021.19 (PyPI's wheels).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "expect_error.h"
#include "hydra_command.h"
#include "mpi_choice.h"
#include "output.h"
#include "program_check.h"

namespace kolo::launcher {
namespace {

const char kMpichVersion[] =
    "HYDRA build details:\n"
    "    Version:                                 5.0.2\n"
    "    Release Date:                            Fri Sep 25 20:45:26 UTC 2026\n"
    "    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist\n";
const char kIntelVersion[] =
    "Intel(R) MPI Library for Linux* OS, Version 2021.19.0 Build 20260929 (id: 1821d9b)\n"
    "Copyright 2003-2026, Intel Corporation.\n";

TEST(HydraVersion, MpichAndIntelMpiAreHydra) {
  MpiVersion mpich = ParseMpirunVersion(kMpichVersion).value();
  EXPECT_EQ(mpich.version, "5.0.2");
  EXPECT_EQ(mpich.dialect, MpiDialect::kHydra);
  EXPECT_EQ(mpich.family, MpiFamily::kMpich);
  MpiVersion intel = ParseMpirunVersion(kIntelVersion).value();
  EXPECT_EQ(intel.version, "2021.19.0");
  EXPECT_EQ(intel.dialect, MpiDialect::kHydra);
  EXPECT_EQ(intel.family, MpiFamily::kIntelMpi);
  EXPECT_STREQ(DialectName(MpiDialect::kHydra), "Hydra");
  EXPECT_STREQ(FamilyName(MpiFamily::kIntelMpi), "Intel MPI");
  EXPECT_EQ(ParseMpirunVersion("mpirun (Open MPI) 5.0.11\n").value().family, MpiFamily::kOpenMpi);
}

// A file system and the programs' answers to --version.
struct FakeMpis {
  std::map<std::string, Result<std::string>> answers;
  Result<std::string> Run(const std::vector<std::string>& argv) const {
    auto it = answers.find(argv.front());
    return it == answers.end() ? Result<std::string>(Status::InvalidArgument("not found"))
                               : it->second;
  }
  bool Executable(const std::string& path) const { return answers.count(path) > 0; }
};

Result<MpiIdentity> Identify(const FakeMpis& f, const std::string& mpirun) {
  return IdentifyMpi(
      mpirun, [&f](const std::vector<std::string>& argv) { return f.Run(argv); },
      [&f](const std::string& p) { return f.Executable(p); });
}

TEST(HydraVersion, TheLauncherIsTheMpiexecHydraBesideAHydraMpirun) {
  FakeMpis f;
  // Intel MPI's mpirun is a script that finds mpiexec.hydra on PATH only: it fails here.
  f.answers.emplace("/impi/bin/mpirun", Status::InvalidArgument("exited with code 127"));
  f.answers.emplace("/impi/bin/mpiexec.hydra", std::string(kIntelVersion));
  MpiIdentity intel = Identify(f, "/impi/bin/mpirun").value();
  EXPECT_EQ(intel.launcher, "/impi/bin/mpiexec.hydra");
  EXPECT_EQ(intel.version.family, MpiFamily::kIntelMpi);
  // MPICH's mpirun is Hydra itself; the job runs the mpiexec.hydra beside it all the same.
  f.answers.emplace("/mpich/bin/mpirun", std::string(kMpichVersion));
  f.answers.emplace("/mpich/bin/mpiexec.hydra", std::string(kMpichVersion));
  EXPECT_EQ(Identify(f, "/mpich/bin/mpirun").value().launcher, "/mpich/bin/mpiexec.hydra");
  // Open MPI's mpirun and MPICH's mpiexec.hydra side by side: the mpirun says which is meant.
  f.answers.emplace("/usr/bin/mpirun", std::string("mpirun (Open MPI) 4.1.4\n"));
  f.answers.emplace("/usr/bin/mpiexec.hydra", std::string(kMpichVersion));
  MpiIdentity open_mpi = Identify(f, "/usr/bin/mpirun").value();
  EXPECT_EQ(open_mpi.launcher, "/usr/bin/mpirun");
  EXPECT_EQ(open_mpi.version.dialect, MpiDialect::kOrte);
  // A Hydra mpirun alone is run itself.
  f.answers.emplace("/old/bin/mpirun", std::string(kMpichVersion));
  EXPECT_EQ(Identify(f, "/old/bin/mpirun").value().launcher, "/old/bin/mpirun");
  f.answers.emplace("/broken/bin/mpirun", Status::InvalidArgument("exited with code 127"));
  ExpectError(Identify(f, "/broken/bin/mpirun").status(), "--version failed: exited with code 127");
}

LaunchPlan HydraPlan(MpiFamily family) {
  LaunchPlan p;
  p.mpirun = "/venv/bin/mpiexec.hydra";
  p.dialect = MpiDialect::kHydra;
  p.family = family;
  p.np = 4;
  p.hosts = {{"a", 2}, {"b", 2}};
  p.rank_exec = "/k/kolo-rank";
  p.command = {"prog", "--flag"};
  return p;
}

TEST(HydraCommand, MpichOnOneHost) {
  LaunchPlan p = HydraPlan(MpiFamily::kMpich);
  p.np = 2;
  p.hosts = {{"localhost", 2}};
  p.single_host = true;
  p.as_root = true;  // Hydra has no such refusal to lift
  p.interface_name = "eth0";
  p.env = {{"MASTER_ADDR", "127.0.0.1"}, {"KOLORUN_TOKEN", "secret"}};
  EXPECT_EQ(BuildMpirunCommand(p),
            (std::vector<std::string>{"/venv/bin/mpiexec.hydra", "-prepend-pattern",
                                      "[%r]<kolorun>:", "-n", "2", "-hosts", "localhost:2",
                                      "-bind-to", "none", "-genvlist", "KOLORUN_TOKEN,MASTER_ADDR",
                                      "/k/kolo-rank", "prog", "--flag"}));
}

TEST(HydraCommand, MpichAcrossHostsNamesTheInterfaceAndTheBinding) {
  LaunchPlan p = HydraPlan(MpiFamily::kMpich);
  p.hosts = {{"a", 3}, {"b", 1}};
  p.binding = "core";
  p.interface_name = "eth1";
  p.extra_mpi_args = {"-launcher", "ssh", "-launcher-exec", "/t/fake_ssh.sh"};
  const std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find(" -n 4 -hosts a:3,b:1 -bind-to core -iface eth1 -launcher ssh "
                      "-launcher-exec /t/fake_ssh.sh /k/kolo-rank prog --flag"),
            std::string::npos)
      << line;
  // An -iface of the user's own is not given twice.
  p.extra_mpi_args = {"-iface", "ib0"};
  const std::vector<std::string> argv = BuildMpirunCommand(p);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "-iface"), 1) << ShellQuote(argv);
}

TEST(HydraCommand, IntelMpiTakesPpnForEqualHostsAndASectionPerHostOtherwise) {
  LaunchPlan p = HydraPlan(MpiFamily::kIntelMpi);
  std::string line = ShellQuote(BuildMpirunCommand(p));
  // Intel MPI ignores a host's ":N" in -hosts; no -bind-to (its pinning is I_MPI_PIN).
  EXPECT_NE(line.find(" -n 4 -hosts a,b -ppn 2 /k/kolo-rank prog --flag"), std::string::npos)
      << line;
  EXPECT_EQ(line.find("-bind-to"), std::string::npos) << line;
  p.hosts = {{"a", 2}, {"b", 1}, {"c", 1}};
  p.env = {{"PATH", "/bin"}};
  p.extra_mpi_args = {"-launcher-exec", "/t/agent"};
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("'[%r]<kolorun>:' -genvlist PATH -launcher-exec /t/agent -n 2 -host a "
                      "/k/kolo-rank prog --flag : -n 1 -host b /k/kolo-rank prog --flag : -n 1 "
                      "-host c /k/kolo-rank prog --flag"),
            std::string::npos)
      << line;
  EXPECT_TRUE(line.rfind("--flag") == line.size() - 6) << line;
}

TEST(HydraVariables, SshOptionsAndIntelMpisBootstrapGoToMpiexecsEnvironment) {
  LaunchPlan p = HydraPlan(MpiFamily::kMpich);
  p.ssh_port = 2222;
  p.ssh_identity_file = "/k/id";
  EXPECT_EQ(HydraLauncherVariables(p, {}),
            (Variables{{"HYDRA_LAUNCHER_EXTRA_ARGS", "-p 2222 -i /k/id"}}));
  p.family = MpiFamily::kIntelMpi;
  EXPECT_EQ(HydraLauncherVariables(p, {}),
            (Variables{{"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-p 2222 -i /k/id"}}));
  // The user's own setting wins.
  EXPECT_TRUE(HydraLauncherVariables(p, {{"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-v"}}).empty());
  // Inside a scheduler's job, Intel MPI starts its proxies the scheduler's way, as its
  // mpirun script does; MPICH's mpiexec finds that itself.
  p.ssh_port = 0;
  p.ssh_identity_file.clear();
  EXPECT_EQ(HydraLauncherVariables(p, {{"SLURM_JOBID", "7"}}),
            (Variables{{"I_MPI_HYDRA_BOOTSTRAP", "slurm"}}));
  EXPECT_EQ(HydraLauncherVariables(p, {{"PE_HOSTFILE", "/x"}}),
            (Variables{{"I_MPI_HYDRA_BOOTSTRAP", "sge"}}));
  EXPECT_TRUE(
      HydraLauncherVariables(p, {{"SLURM_JOBID", "7"}, {"I_MPI_HYDRA_BOOTSTRAP", "ssh"}}).empty());
  p.extra_mpi_args = {"-launcher", "ssh"};
  EXPECT_TRUE(HydraLauncherVariables(p, {{"SLURM_JOBID", "7"}}).empty());
  p.family = MpiFamily::kMpich;
  p.extra_mpi_args.clear();
  EXPECT_TRUE(HydraLauncherVariables(p, {{"SLURM_JOBID", "7"}}).empty());
}

TEST(HydraVariables, IntelPinningTheChosenLibraryAndTheJobsNetwork) {
  LaunchPlan p = HydraPlan(MpiFamily::kIntelMpi);
  p.network_interfaces = {"10.0.0.0/24"};
  Variables v = HydraRankVariables(p, "/impi/lib", {{"LD_LIBRARY_PATH", "/opt/lib"}});
  EXPECT_EQ(v, (Variables{{"I_MPI_PIN", "0"},
                          {"LD_LIBRARY_PATH", "/impi/lib:/opt/lib"},
                          {kMpiInterfaces, "10.0.0.0/24"}}));
  p.binding = "hwthread";
  p.single_host = true;
  v = HydraRankVariables(p, "", {});
  EXPECT_EQ(v, (Variables{{"I_MPI_PIN", "1"}, {"I_MPI_PIN_DOMAIN", "1"}, {kMpiInterfaces, "lo"}}));
  p.binding = "socket";
  EXPECT_EQ(HydraRankVariables(p, "", {}).at("I_MPI_PIN_DOMAIN"), "socket");
  // Pinning of the user's own is left alone; MPICH pins with -bind-to.
  EXPECT_EQ(HydraRankVariables(p, "", {{"I_MPI_PIN_PROCESSOR_LIST", "0,2"}}).count("I_MPI_PIN"), 0);
  p.family = MpiFamily::kMpich;
  EXPECT_EQ(HydraRankVariables(p, "", {}), (Variables{{kMpiInterfaces, "lo"}}));
}

TEST(HydraVariables, TransportsAreToldThisHostsNamesForTheJobsNetwork) {
  const std::vector<std::pair<std::string, std::string>> here = {
      {"lo", "127.0.0.1"}, {"eth0", "192.0.2.2"}, {"veth1", "10.232.0.2"}, {"ib0", "10.9.0.5"}};
  EXPECT_EQ(TransportInterfaces("lo", here),
            (Variables{{"UCX_NET_DEVICES", "lo"}, {"FI_TCP_IFACE", "lo"}}));
  // By network: another host's interface there may have another name.
  EXPECT_EQ(TransportInterfaces("10.232.0.0/24", here),
            (Variables{{"UCX_NET_DEVICES", "veth1"}, {"FI_TCP_IFACE", "veth1"}}));
  EXPECT_EQ(TransportInterfaces("eth0,10.9.0.0/16", here),
            (Variables{{"UCX_NET_DEVICES", "eth0,ib0"}, {"FI_TCP_IFACE", "eth0"}}));
  EXPECT_TRUE(TransportInterfaces("172.16.0.0/12", here).empty());
}

TEST(HydraOutput, TagsOfEveryPieceMakeWholeLinesOnTheStreamsPipe) {
  OutputAssembler a(OutputTags::kHydra);
  // Measured: unbuffered pieces of two ranks, each piece tagged, lines cut mid-way.
  std::vector<OutputLine> out = a.Feed(
      "[1]<kolorun>:r1-a0 [0]<kolorun>:r0-a0 [1]<kolorun>:b0\n[1]<kolorun>:x[0] = 3\n[0]<k", false);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rank, 1);
  EXPECT_EQ(out[0].text, "r1-a0 b0");
  EXPECT_FALSE(out[0].is_stderr);
  // "[0] " of the rank's own is text.
  EXPECT_EQ(out[1].text, "x[0] = 3");
  out = a.Feed("olorun>:b0\n\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n", false);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].rank, 0);
  EXPECT_EQ(out[0].text, "r0-a0 b0");
  EXPECT_EQ(out[1].rank, -1);  // Hydra's own banner
  EXPECT_EQ(out[2].text, "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES");
  out = a.Feed("[1]<kolorun>:Traceback\n", true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_stderr);
  EXPECT_EQ(out[0].rank, 1);
}

TEST(HydraOutput, HydrasOwnWordsWithoutWhereInItsSourceTheyWereSaid) {
  EXPECT_EQ(HydraMessage("[mpiexec@vm] ui_cmd_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/"
                         "pmiserv_pmci.c:51): Launch proxy failed."),
            "Launch proxy failed.");
  EXPECT_EQ(HydraMessage("[mpiexec@vm] Error: Unable to run bstrap_proxy on 127.0.0.2 (pid 12582, "
                         "exit code 256)"),
            "Error: Unable to run bstrap_proxy on 127.0.0.2 (pid 12582, exit code 256)");
  EXPECT_EQ(HydraMessage("agent: cannot start it"), "");
}

TEST(HydraRemoteAgent, LauncherExecNamesTheAgent) {
  EXPECT_EQ(RemoteAgent({"-launcher", "ssh", "-launcher-exec", "/t/fake_ssh.sh"}, ""),
            (std::vector<std::string>{"/t/fake_ssh.sh"}));
  EXPECT_EQ(RemoteAgent({"-bootstrap-exec", "/t/qrsh"}, ""), (std::vector<std::string>{"/t/qrsh"}));
  EXPECT_EQ(RemoteAgent({}, "/t/env_agent"), (std::vector<std::string>{"/t/env_agent"}));
}

}  // namespace
}  // namespace kolo::launcher
