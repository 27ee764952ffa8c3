#include "check_build.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace kolo::launcher {
namespace {

// Reads `fd` to its end.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// The child's side of CaptureStdout, between fork and exec. An exec failure
// reaches the parent as the errno value written on `error_fd`, which the
// exec closes when it succeeds (O_CLOEXEC).
[[noreturn]] void ExecChild(const std::vector<char*>& argv, int stdout_fd, int error_fd) {
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDERR_FILENO);
  }
  dup2(stdout_fd, STDOUT_FILENO);
  execv(argv[0], argv.data());
  const int error = errno;
  [[maybe_unused]] ssize_t written = write(error_fd, &error, sizeof error);
  _exit(127);
}

// Why the child did not run or did not succeed; "" when it exited with 0.
std::string Failure(const std::string& exec_error, int wait_status) {
  if (exec_error.size() == sizeof(int)) {
    int error = 0;
    std::memcpy(&error, exec_error.data(), sizeof error);
    return error == ENOENT ? "not found" : std::strerror(error);
  }
  if (WIFSIGNALED(wait_status)) return "killed by signal " + std::to_string(WTERMSIG(wait_status));
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0) {
    return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  }
  return "";
}

}  // namespace

Result<std::string> CaptureStdout(const std::vector<std::string>& args) {
  if (args.empty() || args[0].empty()) return Status::InvalidArgument("not found (empty path)");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out_pipe[2] = {-1, -1}, error_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(error_pipe, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1]}) close(fd);
    return Status::Internal("pipe failed: " + why);
  }
  const pid_t child = fork();
  if (child == 0) ExecChild(argv, out_pipe[1], error_pipe[1]);
  const int fork_errno = errno;
  close(out_pipe[1]);
  close(error_pipe[1]);
  std::string out = child > 0 ? ReadAll(out_pipe[0]) : "";
  const std::string exec_error = child > 0 ? ReadAll(error_pipe[0]) : "";
  close(out_pipe[0]);
  close(error_pipe[0]);
  if (child < 0) return Status::Internal(std::string("fork failed: ") + std::strerror(fork_errno));
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string failure = Failure(exec_error, status);
  if (!failure.empty()) return Status::InvalidArgument(failure);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::vector<std::string> FrameworkVersions(const std::string& python,
                                           const std::vector<std::string>& modules) {
  std::string names;
  for (const std::string& m : modules) names += "'" + m + "', ";
  // A line per module: its version, "not found", or the first line of the
  // error. TF_CPP_MIN_LOG_LEVEL quiets TensorFlow (stderr is /dev/null anyway).
  const std::string code =
      "import os\n"
      "os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')\n"
      "for name in (" +
      names +
      "):\n"
      "    try:\n"
      "        line = __import__(name).__version__\n"
      "    except ImportError as e:\n"
      "        line = 'not found' if e.name == name else 'import failed: %s' % e\n"
      "    except Exception as e:\n"
      "        line = 'import failed: %s: %s' % (type(e).__name__, e)\n"
      "    print((str(line).splitlines() or ['?'])[0])\n";
  Result<std::string> out = CaptureStdout({python, "-c", code});
  std::vector<std::string> lines;
  if (out.ok()) {
    std::string line;
    for (std::istringstream text(out.value()); std::getline(text, line);) lines.push_back(line);
  }
  // No interpreter, or one that died on an import (TensorFlow's wheels need
  // AVX; SIGILL without): the modules it did not answer for say why.
  const std::string why = !out.ok() && out.status().message() != "not found"
                              ? "import failed: " + out.status().message()
                              : "not found";
  lines.resize(modules.size(), why);
  return lines;
}

int CheckBuild(const std::string& python, const std::string& chosen_by,
               const std::string& job_mpi) {
  std::printf("kolo %s build:\n", KOLO_VERSION);
  std::printf("  %-16s %s\n", "MPI (job)", job_mpi.c_str());
  std::printf("  %-16s %s\n", "CUDA / NCCL",
              KOLO_CUDA_FOUND ? "yes (NCCL collectives on CUDA tensors)" : "no (built without)");
  Result<std::string> version =
      CaptureStdout({python, "-c", "import platform; print(platform.python_version())"});
  std::string python_line = python + (version.ok() ? " (" + version.value() + "), " + chosen_by
                                                   : ": " + version.status().message() +
                                                         "; KOLO_PYTHON names the interpreter");
  std::printf("  %-16s %s\n", "Python", python_line.c_str());
  // The MPI ABIs the package has a libkolo for (kolo/_builds.py), the one
  // kolo/_mpi_library.py chose when kolo.common.basics imported _core, and why,
  // and the libmpi file the process then mapped. Open MPI 4.x and 5.x share one
  // ABI (libmpi.so.40); MPICH, Intel MPI, MVAPICH and Cray MPICH another.
  // An import that fails says why (no kolo for this Python, an MPI of an ABI
  // the package was not built for: kolo/_mpi_library.py's ImportError).
  Result<std::string> binding = CaptureStdout(
      {python, "-c",
       "try:\n"
       "    import kolo.common.basics\n"
       "    from kolo import _mpi_library as m\n"
       "except Exception as e:\n"
       "    print('unknown: the Python binding does not import')\n"
       "    print('no: %s: %s' % (type(e).__name__, (str(e).splitlines() or [''])[0]))\n"
       "else:\n"
       "    maps = [l.split()[-1] for l in open('/proc/self/maps') if 'libmpi' in l]\n"
       "    print(', '.join(m.NAMES[a] for a in m._builds()))\n"
       "    print('yes: on %s (%s); libmpi: %s' % (m.NAMES[m.CHOSEN.abi], m.CHOSEN.why,\n"
       "          maps[0] if maps else '?'))"});
  std::string builds = "unknown: the Python binding does not import", chosen = "no";
  if (binding.ok()) {
    std::istringstream text(binding.value());
    std::getline(text, builds);
    std::getline(text, chosen);
    if (chosen.rfind("yes", 0) != 0 && chosen.rfind("no: ", 0) != 0) chosen = "no";
  }
  std::printf("  %-16s %s\n", "MPI (built)", builds.c_str());
  std::printf("  %-16s %s\n", "Python binding", chosen.c_str());
  // PyTorch on its own, TensorFlow and Keras together (Keras imports
  // TensorFlow, seconds): a framework whose import kills the interpreter
  // (TensorFlow's wheels need AVX) costs only its own lines.
  const std::vector<std::string> torch = FrameworkVersions(python, {"torch"});
  const std::vector<std::string> tf = FrameworkVersions(python, {"tensorflow", "keras"});
  std::printf("  %-16s %s\n", "PyTorch", torch[0].c_str());
  std::printf("  %-16s %s\n", "TensorFlow", tf[0].c_str());
  std::printf("  %-16s %s\n", "Keras", tf[1].c_str());
  return 0;
}

}  // namespace kolo::launcher
