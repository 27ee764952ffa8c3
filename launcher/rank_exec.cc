// kolo-rank: the first program of every rank under kolorun. It gives the
// rank the environment that other libraries expect (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK, GROUP_WORLD_SIZE,
// TORCHELASTIC_RUN_ID,
// ...) from Open MPI's OMPI_COMM_WORLD_* values (or Hydra's PMI_RANK,
// PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS), runs the user's command as
// its child, forwards SIGINT/SIGTERM to it, and when the command fails it
// prints one marker line that kolorun turns into "rank R on host H exited
// with code C".
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bind_shim.h"
#include "command.h"
#include "hosts.h"
#include "hydra_command.h"
#include "kolo/env_names.h"
#include "kolo/launch_settings.h"
#include "rendezvous.h"

namespace {

pid_t g_child = -1;

void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

std::string Get(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

void Set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// The node index of `rank` when ranks fill the hosts slot by slot.
int NodeRank(int rank) {
  auto hosts = kolo::launcher::ParseHostSpec(Get(kolo::env::kLaunchHosts));
  if (!hosts.ok()) return 0;
  std::vector<int> map = kolo::launcher::MapBySlot(hosts.value(), rank + 1);
  return map.empty() ? 0 : map.back();
}

// The number of hosts that `size` ranks fill slot by slot (torchrun's groups).
int NodeCount(int size) {
  auto hosts = kolo::launcher::ParseHostSpec(Get(kolo::env::kLaunchHosts));
  if (!hosts.ok() || size < 1) return 1;
  std::vector<int> map = kolo::launcher::MapBySlot(hosts.value(), size);
  return map.empty() ? 1 : map.back() + 1;
}

void SetRankEnvironment() {
  const std::string rank = Get("OMPI_COMM_WORLD_RANK", Get("PMI_RANK", "0").c_str());
  const std::string size = Get("OMPI_COMM_WORLD_SIZE", Get("PMI_SIZE", "1").c_str());
  const std::string local_rank =
      Get("OMPI_COMM_WORLD_LOCAL_RANK", Get("MPI_LOCALRANKID", "0").c_str());
  const std::string local_size =
      Get("OMPI_COMM_WORLD_LOCAL_SIZE", Get("MPI_LOCALNRANKS", "1").c_str());
  const std::string node = std::to_string(NodeRank(std::atoi(rank.c_str())));
  Set("RANK", rank);
  Set("WORLD_SIZE", size);
  Set("LOCAL_RANK", local_rank);
  Set("LOCAL_WORLD_SIZE", local_size);
  Set("NODE_RANK", node);
  Set("GROUP_RANK", node);
  Set("GROUP_WORLD_SIZE", std::to_string(NodeCount(std::atoi(size.c_str()))));
  Set("ROLE_RANK", rank);
  Set("ROLE_WORLD_SIZE", size);
  // torchrun's mark. Lightning then takes the ranks above (its TorchElastic environment)
  // before it looks at Slurm's variables, which inside an sbatch script are the batch
  // step's (SLURM_PROCID=0 on every rank: every process would be global rank 0).
  if (Get("TORCHELASTIC_RUN_ID").empty()) Set("TORCHELASTIC_RUN_ID", "kolorun");
}

// kolorun --pin-gpus: this rank sees only its own GPU (as cuda:0). JAX is
// told so too: jax.distributed.initialize() would otherwise pick device
// LOCAL_RANK of the ones visible, which local ranks above 0 do not have.
bool PinGpu() {
  if (Get(kolo::env::kPinGpus) != "1") return true;
  auto pinned = kolo::launcher::PinnedGpu(Get("CUDA_VISIBLE_DEVICES"),
                                          std::atoi(Get("LOCAL_RANK", "0").c_str()));
  if (!pinned.ok()) {
    std::fprintf(stderr, "kolo-rank: %s\n", pinned.status().message().c_str());
    return false;
  }
  Set("CUDA_VISIBLE_DEVICES", pinned.value());
  Set("JAX_LOCAL_DEVICE_IDS", "0");
  return true;
}

// Tells kolorun that this rank started (skipped when run without kolorun).
bool RegisterWithKolorun() {
  const std::string rendezvous = Get(kolo::env::kRendezvous);
  if (rendezvous.empty()) return true;
  size_t colon = rendezvous.rfind(':');
  kolo::launcher::Registration me;
  me.rank = std::atoi(Get("RANK").c_str());
  me.local_rank = std::atoi(Get("LOCAL_RANK").c_str());
  char name[256] = "?";
  gethostname(name, sizeof name - 1);
  me.host = name;
  me.pid = getpid();
  kolo::Status s = kolo::launcher::Register(
      rendezvous.substr(0, colon), std::atoi(rendezvous.substr(colon + 1).c_str()),
      kolo::launcher::RegistrationMessage(Get(kolo::env::kToken), me), 10.0);
  if (!s.ok()) std::fprintf(stderr, "kolo-rank: rank %d: %s\n", me.rank, s.message().c_str());
  return s.ok();
}

// Across hosts Open MPI's TCP transport listens in the program's MPI library:
// the program starts with kolorun's bind shim preloaded (bind_shim.h), which
// narrows only Open MPI's own listeners.
void PreloadBindShim() {
  const std::string shim = Get(kolo::launcher::kBindLibrary);
  if (shim.empty()) return;
  const std::string preload = Get("LD_PRELOAD");
  Set("LD_PRELOAD", preload.empty() ? shim : shim + ":" + preload);
  // A program built with GCC's AddressSanitizer refuses to start when another
  // library is preloaded before its runtime, unless told that this is wanted.
  const std::string asan = Get("ASAN_OPTIONS");
  Set("ASAN_OPTIONS", (asan.empty() ? "" : asan + ":") + "verify_asan_link_order=0");
}

// Under Hydra, MPI's transports (MPICH's UCX, libfabric's TCP provider) are
// told this host's interfaces on the job's network, which kolorun knows by
// name or by network only (another host's names may differ). A setting of
// the user's own wins.
void NameTransportInterfaces() {
  const std::string spec = Get(kolo::launcher::kMpiInterfaces);
  if (spec.empty()) return;
  std::vector<std::pair<std::string, std::string>> interfaces;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char address[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, address,
              sizeof address);
    interfaces.emplace_back(i->ifa_name, address);
  }
  freeifaddrs(list);
  for (const auto& [name, value] : kolo::launcher::TransportInterfaces(spec, interfaces)) {
    if (Get(name.c_str()).empty()) Set(name.c_str(), value);
  }
}

// The rank's exit code from the command's wait status; when the command
// failed, also the marker line that kolorun reports.
int ReportExit(int status) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::string rank = Get("RANK");
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::fprintf(stderr, "KOLORUN-RANK-EXIT rank=%s host=%s signal=%d\n", rank.c_str(), host, sig);
    std::fflush(stderr);
    return 128 + sig;
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code != 0) {
    std::fprintf(stderr, "KOLORUN-RANK-EXIT rank=%s host=%s code=%d\n", rank.c_str(), host, code);
    std::fflush(stderr);
  }
  return code;
}

// How long the command may stay stopped before it is ended: the stall
// shutdown time (KOLO_STALL_SHUTDOWN_TIME_SECONDS or its HOROVOD_ alias),
// none when stall checks are off. A bad value is the rank's to report.
double StopLimitSeconds() {
  kolo::Result<kolo::LaunchSettings> settings = kolo::ReadLaunchSettings();
  if (!settings.ok()) return kolo::DefaultLaunchSettings().stall_shutdown_seconds;
  return settings.value().stall_shutdown_seconds;
}

// Waits for the command to end and returns its wait status. A command
// stopped by a signal (SIGSTOP, SIGTSTP, ...) after submitting a collective
// holds every other rank inside that collective, where no stall check looks:
// they have nothing left to negotiate. Stopped for longer than `limit`
// seconds (0: no limit), it is ended with SIGKILL, saying why, so that the
// job ends with a named error instead of hanging.
int WaitForCommand(double limit) {
  using Clock = std::chrono::steady_clock;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::string rank = Get("RANK");
  bool stopped = false;
  int stop_signal = 0;
  Clock::time_point since;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(g_child, &status, WUNTRACED | WCONTINUED | (stopped ? WNOHANG : 0));
    if (r < 0) {
      if (errno == EINTR) continue;
      std::perror("kolo-rank: waitpid");
      return status;
    }
    if (r == 0) {  // still stopped
      const double seconds = std::chrono::duration<double>(Clock::now() - since).count();
      if (limit > 0 && seconds >= limit) {
        std::fprintf(stderr,
                     "kolo-rank: rank %s on host %s stayed stopped by signal %d (SIG%s) for %.0f s "
                     "while the other ranks waited for it; ending it "
                     "(KOLO_STALL_SHUTDOWN_TIME_SECONDS=%g)\n",
                     rank.c_str(), host, stop_signal, sigabbrev_np(stop_signal), seconds, limit);
        std::fflush(stderr);
        kill(g_child, SIGKILL);
        stopped = false;  // the next wait sees it die
        continue;
      }
      usleep(100 * 1000);
      continue;
    }
    if (WIFSTOPPED(status)) {
      stopped = true;
      stop_signal = WSTOPSIG(status);
      since = Clock::now();
      if (limit > 0) {
        std::fprintf(stderr,
                     "kolo-rank: rank %s on host %s was stopped by signal %d (SIG%s); the other "
                     "ranks wait for it: it is ended after %g s stopped unless continued "
                     "(KOLO_STALL_SHUTDOWN_TIME_SECONDS)\n",
                     rank.c_str(), host, stop_signal, sigabbrev_np(stop_signal), limit);
        std::fflush(stderr);
      }
      continue;
    }
    if (WIFCONTINUED(status)) {
      stopped = false;
      continue;
    }
    return status;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "kolo-rank: no command given (kolorun starts this program)\n");
    return 2;
  }
  SetRankEnvironment();
  if (!PinGpu() || !RegisterWithKolorun()) return 2;
  PreloadBindShim();
  NameTransportInterfaces();
  g_child = fork();
  if (g_child < 0) {
    std::perror("kolo-rank: fork");
    return 2;
  }
  if (g_child == 0) {
    execvp(argv[1], argv + 1);
    std::fprintf(stderr, "kolo-rank: cannot run '%s': %s\n", argv[1], std::strerror(errno));
    _exit(127);
  }
  struct sigaction sa {};
  sa.sa_handler = Forward;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const int code = ReportExit(WaitForCommand(StopLimitSeconds()));
  if (code != 0 && Get(kolo::env::kElasticInPlace) == "1") {
    // Open MPI 5's fault tolerance tells the other ranks about a process
    // that died by a signal, but not about one that exited with a code
    // (measured: they waited forever). In-place elastic mode ends this rank
    // by SIGKILL, so that the survivors learn of the loss and shrink; the
    // marker above keeps the command's own code for kolorun's report.
    kill(getpid(), SIGKILL);
  }
  return code;
}
