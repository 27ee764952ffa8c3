// The mpirun command line, built as an argv vector (never a shell string),
// in the dialect of the MPI that runs it: Open MPI's ORTE or PRRTE here,
// Hydra's (MPICH, Intel MPI) in hydra_command.h.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "hosts.h"
#include "mpi_choice.h"

namespace kolo::launcher {

struct LaunchPlan {
  std::string mpirun = "mpirun";
  MpiDialect dialect = MpiDialect::kOrte;  // the command line's words (mpi_choice.h)
  MpiFamily family = MpiFamily::kOpenMpi;  // Hydra's words differ between MPICH and Intel MPI
  int np = 1;
  std::vector<HostSlots> hosts;  // already clipped to the ranks that run
  bool as_root = false;
  bool oversubscribe = false;    // some host gets more ranks than it has cores
  std::string binding = "none";  // mpirun --bind-to value
  int ssh_port = 0;
  std::string ssh_identity_file;
  // OMPI_MCA_plm_rsh_agent from kolorun's environment: ORTE reads it there,
  // PRRTE ignores it, so the PRRTE command passes it as plm_ssh_agent.
  std::string rsh_agent_variable;
  std::vector<std::string> network_interfaces;
  // This machine's interface on the job's network, by name (Hydra's -iface), or "".
  std::string interface_name;
  // Every host is this machine: MPI on shared memory, no TCP transport, and
  // Open MPI's out-of-band channel on loopback.
  bool single_host = false;
  // libkolo_bind.so (bind_shim.h), or "": across hosts, Open MPI's daemons
  // preload it so that they listen on `network_interfaces` only.
  std::string bind_library;
  // libkolo_prrte.so (prrte_shim.h), or "": mpirun and its daemons preload it
  // where kolo spawns into the job (PreloadsPrrteShim).
  std::string prrte_library;
  // Variables every rank gets: name -> value (set on kolorun's side, sent with -x).
  std::map<std::string, std::string> env;
  // An incarnation of an elastic job: its ranks, once they must end, end at once.
  bool elastic = false;
  // ... recovered in place (KOLO_ELASTIC_IN_PLACE): PRRTE's fault tolerance on.
  bool fault_tolerant = false;
  std::vector<std::string> extra_mpi_args;  // --mpi-args, already split
  std::string rank_exec;                    // the per-rank wrapper that maps the environment
  std::vector<std::string> command;         // the user's program and its arguments
};

// Whether the MPI's runtime (mpirun, its daemons; Hydra's mpiexec and
// proxies) is held to the job's network (`network_interfaces`, or loopback
// on one host). Not for PRRTE
// across hosts reached over loopback (the tests' stand-in hosts): PRRTE
// takes no loopback channel where another interface exists (mpirun exits
// 213), so it talks on that other interface, where it must listen too.
bool RuntimeOnJobNetwork(const LaunchPlan& plan);

// Whether mpirun and its daemons preload the PRRTE shim (prrte_shim.h): on
// PRRTE, in a fault-tolerant job, which kolo grows by MPI_Comm_spawn.
bool PreloadsPrrteShim(const LaunchPlan& plan);

// The argv that runs `plan`; `plan.env`'s variables are passed by name with
// `-x NAME`, so their values must be in mpirun's own environment (kolorun's,
// plus the variables kolorun sets when it starts mpirun).
std::vector<std::string> BuildMpirunCommand(const LaunchPlan& plan);

// The names of variables forwarded from kolorun's own environment to every
// rank: KOLO_*, HOROVOD_* (the runtime reads Horovod's names too), NCCL_*, PATH, LD_LIBRARY_PATH,
// PYTHONPATH, PYTHONUNBUFFERED, and the user's -x names.
std::vector<std::string> ForwardedNames(const std::map<std::string, std::string>& environment,
                                        const std::vector<std::string>& user_names);

// Splits --mpi-args like a shell would for plain words and quotes ('..', "..").
Result<std::vector<std::string>> SplitArgs(const std::string& text);

// Renders argv so that it can be pasted into a shell (for --dry-run).
std::string ShellQuote(const std::vector<std::string>& argv);

// kolorun --pin-gpus: the CUDA_VISIBLE_DEVICES of the rank with `local_rank`
// on its host. `visible` is the variable as the rank found it (empty when
// unset): the rank keeps the local_rank-th entry of that list, or device
// `local_rank` when unset. An error when the list is too short.
Result<std::string> PinnedGpu(const std::string& visible, int local_rank);

// horovodrun's flags (horovod/runner/launch.py) that kolorun does not have
// under the same name, so that a horovodrun command line works after
// s/horovodrun/kolorun/ or fails before anything starts, saying what to do.
struct HorovodrunFlag {
  enum class Kind {
    kRenamed,       // becomes kolorun's flag `text`, with the same values
    kRenamedEach,   // each comma-separated value becomes its own kolorun flag `text`
    kSetsVariable,  // becomes -x `text` (NAME=VALUE) for every rank
    kIgnored,       // accepted and ignored; `text` is the note kolorun prints
    kRefused,       // kolorun stops; `text` says what to do instead
  };
  const char* name;
  int values;  // how many values follow the flag
  Kind kind;
  const char* text;
};
const std::vector<HorovodrunFlag>& HorovodrunFlags();

struct TranslatedArgs {
  std::vector<std::string> args;   // kolorun's own arguments
  std::vector<std::string> notes;  // one line per ignored flag
};

// Rewrites kolorun's arguments (argv without argv[0]) so that horovodrun's
// flags become kolorun's. Stops at the program's command line: the first
// argument that is neither an option nor an option's value (or the one
// after "--"), which is kept as it is. `value_options` names kolorun's
// options that take a value ("--np", "-H", ...). A refused flag is an error
// naming the flag.
Result<TranslatedArgs> TranslateHorovodrunArgs(const std::vector<std::string>& args,
                                               const std::set<std::string>& value_options);

}  // namespace kolo::launcher
