// kolorun --check-build: what this build has (MPI, CUDA/NCCL), and whether
// the Python interpreter named by KOLO_PYTHON imports kolo, and which versions
// of PyTorch, TensorFlow and Keras.
#pragma once

#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

// Runs argv[0] (a path, not searched in PATH) with `argv`, without a shell,
// stdin and stderr on /dev/null; returns what it wrote on stdout, without the
// trailing newline, when it exits with 0. An error says why not: "not found"
// when argv[0] does not exist.
Result<std::string> CaptureStdout(const std::vector<std::string>& argv);

// Asks `python` for each module's __version__ (one child for all of them);
// returns a line per module: the version, "not found", or "import failed: why".
std::vector<std::string> FrameworkVersions(const std::string& python,
                                           const std::vector<std::string>& modules);

// Prints the build report; `python` is the interpreter to ask, `chosen_by`
// says why that one ("from KOLO_PYTHON", ...), `job_mpi` which mpirun a job
// would run and why (mpi_choice.h). Returns kolorun's exit code.
int CheckBuild(const std::string& python, const std::string& chosen_by, const std::string& job_mpi);

}  // namespace kolo::launcher
