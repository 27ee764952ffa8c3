// kolorun's choice of MPI (launcher/mpi_choice.h) and the mpirun command line
// in Open MPI 5's dialect (PRRTE), beside Open MPI 4.1's (ORTE) in launcher_test.cc.
#include <gtest/gtest.h>

#include <set>

#include "command.h"
#include "expect_error.h"
#include "mpi_choice.h"
#include "output.h"

namespace kolo::launcher {
namespace {

TEST(MpirunVersion, OpenMpi4And5AndWhatIsRefused) {
  Result<MpiVersion> v4 =
      ParseMpirunVersion("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/\n");
  ASSERT_TRUE(v4.ok()) << v4.status().message();
  EXPECT_EQ(v4.value().version, "4.1.4");
  EXPECT_EQ(v4.value().dialect, MpiDialect::kOrte);
  Result<MpiVersion> v5 = ParseMpirunVersion("mpirun (Open MPI) 5.0.11\n");
  ASSERT_TRUE(v5.ok()) << v5.status().message();
  EXPECT_EQ(v5.value().version, "5.0.11");
  EXPECT_EQ(v5.value().dialect, MpiDialect::kPrrte);
  EXPECT_STREQ(DialectName(MpiDialect::kPrrte), "PRRTE");
  ExpectError(ParseMpirunVersion("mpirun (Open MPI) 3.1.6\n").status(),
              "Open MPI 3.1.6 is too old");
  ExpectError(ParseMpirunVersion("something else\n").status(),
              "neither Open MPI's nor Hydra's (MPICH, Intel MPI): its --version says \"something "
              "else\"");
}

TEST(MpirunChoice, SettingThenPathThenBesideKolorun) {
  std::set<std::string> files = {"/opt/ompi5/bin/mpirun", "/usr/bin/mpirun", "/venv/bin/mpirun",
                                 "/cluster/mpirun"};
  auto exists = [&files](const std::string& p) { return files.count(p) > 0; };
  // An installation's folder, or an mpirun itself.
  MpiChoice c =
      ChooseMpirun("/opt/ompi5", "KOLO_MPI_HOME", "/usr/bin", "/venv/bin", exists).value();
  EXPECT_EQ(c.mpirun, "/opt/ompi5/bin/mpirun");
  EXPECT_EQ(c.why, "from KOLO_MPI_HOME");
  EXPECT_FALSE(c.on_path);
  c = ChooseMpirun("/cluster/mpirun", "--mpi-home", "/usr/bin", "/venv/bin", exists).value();
  EXPECT_EQ(c.mpirun, "/cluster/mpirun");
  EXPECT_EQ(c.why, "from --mpi-home");
  ExpectError(ChooseMpirun("/nope", "KOLO_MPI_HOME", "/usr/bin", "/venv/bin", exists).status(),
              "KOLO_MPI_HOME=/nope: neither an mpirun nor an MPI installation's folder");
  // The first mpirun on PATH: whichever the user put first.
  c = ChooseMpirun("", "KOLO_MPI_HOME", "/home/u/bin:/venv/bin:/usr/bin", "/x", exists).value();
  EXPECT_EQ(c.mpirun, "/venv/bin/mpirun");
  EXPECT_TRUE(c.on_path);
  EXPECT_EQ(c.why, "the first mpirun on PATH");
  // None on PATH: the one beside kolorun (a virtual environment not activated).
  c = ChooseMpirun("", "KOLO_MPI_HOME", "/bin", "/venv/bin", exists).value();
  EXPECT_EQ(c.mpirun, "/venv/bin/mpirun");
  EXPECT_FALSE(c.on_path);
  ExpectError(ChooseMpirun("", "KOLO_MPI_HOME", "/bin", "/x", exists).status(),
              "no mpirun: none on PATH and none beside kolorun (/x)");
}

LaunchPlan PrrtePlan() {
  LaunchPlan p;
  p.mpirun = "/venv/bin/mpirun";
  p.dialect = MpiDialect::kPrrte;
  p.np = 4;
  p.hosts = {{"a", 2}, {"b", 2}};
  p.command = {"prog"};
  return p;
}

TEST(PrrteCommand, OversubscribeSharedMemoryAndOneHost) {
  LaunchPlan p = PrrtePlan();
  p.hosts = {{"localhost", 4}};
  p.single_host = true;
  p.oversubscribe = true;
  const std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--map-by slot:OVERSUBSCRIBE --mca mpi_yield_when_idle 1 --mca pml ob1 "
                      "--mca btl self,sm prog"),
            std::string::npos)
      << line;
  // PRRTE refuses a loopback-only channel (exit 213): the shim alone holds it there.
  EXPECT_EQ(line.find("oob_tcp_if_include"), std::string::npos) << line;
  EXPECT_EQ(line.find("--oversubscribe"), std::string::npos) << line;
  EXPECT_EQ(line.find("vader"), std::string::npos) << line;
  EXPECT_TRUE(RuntimeOnJobNetwork(p));
}

TEST(PrrteCommand, AcrossHostsPrteParametersAndTheShimInPrted) {
  LaunchPlan p = PrrtePlan();
  p.network_interfaces = {"eth1"};
  p.bind_library = "/k/libkolo_bind.so";
  p.ssh_port = 2222;
  p.rsh_agent_variable = "/bin/my_ssh";
  std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--mca btl self,sm,tcp --mca btl_tcp_if_include eth1 --prtemca "
                      "prte_if_include eth1 --prtemca prte_launch_agent 'env "
                      "LD_PRELOAD=/k/libkolo_bind.so KOLORUN_BIND_INTERFACES=eth1 prted' "
                      "--prtemca plm_ssh_args '-p 2222' --prtemca plm_ssh_agent /bin/my_ssh"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("orte"), std::string::npos) << line;
  EXPECT_EQ(line.find("plm_rsh"), std::string::npos) << line;
  // The user's agent wins over the variable's.
  p.extra_mpi_args = {"--mca", "plm_rsh_agent", "/bin/other"};
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_EQ(line.find("/bin/my_ssh"), std::string::npos) << line;
  // Hosts reached over loopback: PRRTE's channel is on another interface, not held to lo.
  p.network_interfaces = {"127.0.0.0/8"};
  EXPECT_FALSE(RuntimeOnJobNetwork(p));
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--mca btl_tcp_if_include 127.0.0.0/8"), std::string::npos) << line;
  EXPECT_EQ(line.find("prte_if_include"), std::string::npos) << line;
  EXPECT_EQ(line.find("LD_PRELOAD"), std::string::npos) << line;
}

// Where kolo spawns (a fault-tolerant job), mpirun's daemons preload the PRRTE shim,
// with the bind shim where the runtime lives on the job's network; a launch agent of
// the user's own wins.
TEST(PrrteCommand, FaultTolerantDaemonsPreloadThePrrteShim) {
  LaunchPlan p = PrrtePlan();
  p.prrte_library = "/k/libkolo_prrte.so";
  std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_FALSE(PreloadsPrrteShim(p));
  EXPECT_EQ(line.find("prte_launch_agent"), std::string::npos) << line;
  p.fault_tolerant = true;
  EXPECT_TRUE(PreloadsPrrteShim(p));
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--prtemca prte_launch_agent 'env LD_PRELOAD=/k/libkolo_prrte.so prted'"),
            std::string::npos)
      << line;
  p.network_interfaces = {"eth1"};
  p.bind_library = "/k/libkolo_bind.so";
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--prtemca prte_launch_agent 'env LD_PRELOAD=/k/libkolo_prrte.so:"
                      "/k/libkolo_bind.so KOLORUN_BIND_INTERFACES=eth1 prted'"),
            std::string::npos)
      << line;
  p.extra_mpi_args = {"--prtemca", "prte_launch_agent", "/opt/prted"};
  line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_EQ(line.find("LD_PRELOAD"), std::string::npos) << line;
  // Open MPI 4.1 (ORTE) spawns nothing of kolo's: no PRRTE shim there.
  p = PrrtePlan();
  p.dialect = MpiDialect::kOrte;
  p.fault_tolerant = true;
  p.prrte_library = "/k/libkolo_prrte.so";
  EXPECT_FALSE(PreloadsPrrteShim(p));
}

TEST(PrrteCommand, ManyHostsAndElastic) {
  LaunchPlan p = PrrtePlan();
  p.hosts.clear();
  for (int i = 0; i < 64; ++i) p.hosts.push_back({"h" + std::to_string(i), 1});
  p.elastic = true;
  const std::string line = ShellQuote(BuildMpirunCommand(p));
  EXPECT_NE(line.find("--prtemca plm_ssh_no_tree_spawn true"), std::string::npos) << line;
  // ORTE's kill wait has no PRRTE counterpart (PRRTE does not wait).
  EXPECT_EQ(line.find("odls_base_sigkill_timeout"), std::string::npos) << line;
}

TEST(PrrteOutput, TheSpaceAfterTheTagIsNotTheRanks) {
  OutputAssembler prrte(OutputTags::kOpenMpiSpace);
  std::vector<OutputLine> lines = prrte.Feed(
      "[1,0]<stdout>: abc\n[1,1]<stderr>:   indented\n[1,0]<stdout>: \nmpirun says\n", false);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rank, 0);
  EXPECT_EQ(lines[0].text, "abc");
  EXPECT_EQ(lines[1].rank, 1);
  EXPECT_TRUE(lines[1].is_stderr);
  EXPECT_EQ(lines[1].text, "  indented");
  EXPECT_EQ(lines[2].text, "");
  EXPECT_EQ(lines[3].rank, -1);
  // A tag cut before its space waits for it.
  EXPECT_TRUE(prrte.Feed("[1,2]<stdout>:", false).empty());
  lines = prrte.Feed(" x\n", false);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rank, 2);
  EXPECT_EQ(lines[0].text, "x");
  // ORTE's tags have no space: a rank's own leading space stays.
  OutputAssembler orte;
  lines = orte.Feed("[1,0]<stdout>: abc\n", false);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, " abc");
}

}  // namespace
}  // namespace kolo::launcher
