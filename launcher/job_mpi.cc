#include "job_mpi.h"

#include <filesystem>

#include "check_build.h"
#include "kolo/env_names.h"
#include "program_check.h"

namespace kolo::launcher {
namespace {

namespace fs = std::filesystem;

// PREFIX/lib of a Hydra launcher at PREFIX/bin, when it holds libmpi.so.12.
std::string HydraLibraryDir(const std::string& launcher) {
  std::error_code ec;
  const fs::path lib = fs::absolute(fs::path(launcher).parent_path().parent_path() / "lib", ec);
  return !ec && fs::exists(lib / "libmpi.so.12", ec) ? lib.lexically_normal().string()
                                                     : std::string();
}

}  // namespace

std::string SelfDir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

// KOLO_MPI_HOME is in the settings table (documented, forwarded, not a typo
// to the ranks) but read here from the environment as given, like
// HOROVOD_START_TIMEOUT: the table's reading would also refuse other
// settings' bad values, which a job's flags may override.
Result<JobMpi> FindJobMpi(const std::string& setting,
                          const std::map<std::string, std::string>& environment) {
  const bool flag = !setting.empty();
  auto home = environment.find("KOLO_MPI_HOME");
  const std::string given = flag ? setting : home == environment.end() ? "" : home->second;
  auto path = environment.find("PATH");
  KOLO_ASSIGN_OR_RETURN(
      MpiChoice choice,
      ChooseMpirun(given, flag ? "--mpi-home" : "KOLO_MPI_HOME",
                   path == environment.end() ? "/usr/local/bin:/usr/bin:/bin" : path->second,
                   SelfDir(), IsExecutableFile));
  Result<MpiIdentity> identity = IdentifyMpi(choice.mpirun, CaptureStdout, IsExecutableFile);
  if (!identity.ok()) {
    return Status::InvalidArgument(choice.mpirun + " (" + choice.why +
                                   "): " + identity.status().message());
  }
  JobMpi mpi{choice, identity.value(), ""};
  if (mpi.identity.version.dialect == MpiDialect::kHydra) {
    mpi.library_dir = HydraLibraryDir(mpi.identity.launcher);
  }
  return mpi;
}

std::string DescribeJobMpi(const JobMpi& mpi) {
  const MpiVersion& v = mpi.identity.version;
  return mpi.identity.launcher + ": " + FamilyName(v.family) + " " + v.version + " (" +
         DialectName(v.dialect) + "), " + mpi.choice.why;
}

void ChooseRecovery(const JobMpi& mpi, const std::map<std::string, std::string>& environment,
                    ElasticRun* run) {
  auto setting = environment.find(env::kElasticInPlace);
  const bool refused = setting != environment.end() && setting->second == "0";
  const MpiVersion& v = mpi.identity.version;
  run->in_place = v.dialect == MpiDialect::kPrrte && !refused;
  if (run->in_place) {
    run->recovery =
        "a lost rank or host is recovered in place: the survivors shrink and go on in the same "
        "processes (Open MPI 5, fault tolerance on)";
  } else if (refused) {
    run->recovery =
        "a lost rank or host restarts every worker from the last commit (KOLO_ELASTIC_IN_PLACE=0)";
  } else if (v.dialect == MpiDialect::kHydra) {
    run->recovery =
        std::string("a lost rank or host restarts every worker from the last commit (") +
        FamilyName(v.family) +
        " has no fault tolerance to recover in place: no ULFM; Open MPI 5 recovers in "
        "place)";
  } else {
    run->recovery =
        "a lost rank or host restarts every worker from the last commit (this Open MPI has no "
        "fault tolerance; Open MPI 5 recovers in place)";
  }
}

}  // namespace kolo::launcher
