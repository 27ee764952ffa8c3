#include "preflight.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>

namespace kolo::launcher {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using udp = asio::ip::udp;

bool IsLocalAddress(const asio::ip::address& a) {
  // Only this machine's own addresses: Open MPI treats other loopback
  // addresses such as 127.0.0.2 as separate hosts, and so do we.
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char buf[NI_MAXHOST];
    socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    if (getnameinfo(i->ifa_addr, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    boost::system::error_code ec;
    auto local = asio::ip::make_address(buf, ec);
    found = !ec && local == a;
  }
  freeifaddrs(list);
  return found;
}

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// How often a host that does not answer yet is tried again, while kolorun waits.
constexpr double kSshRetrySeconds = 1.0;

// One host's probe: resolve, then connect to the ssh port unless the host is
// this machine; each try bounded by `try_seconds`, tried again until
// `wait_until` while it fails.
struct Probe : std::enable_shared_from_this<Probe> {
  // Why the last try failed.
  enum class Failure { kNone, kResolve, kConnect, kTimeout };

  Probe(asio::io_context& io, std::string h, int p, double try_s, Clock::time_point until)
      : host(std::move(h)),
        port(p),
        try_seconds(try_s),
        wait_until(until),
        resolver(io),
        socket(io),
        try_timer(io),
        retry_timer(io) {}

  void Start() {
    const int this_try = ++current_try;
    auto self = shared_from_this();
    try_timer.expires_after(Millis(try_seconds));
    try_timer.async_wait([self, this_try](const boost::system::error_code& ec) {
      if (ec || this_try != self->current_try || self->done) return;
      self->Fail(this_try, Failure::kTimeout, "");
      self->resolver.cancel();
      boost::system::error_code ignored;
      self->socket.close(ignored);
    });
    resolver.async_resolve(
        host, std::to_string(port),
        [self, this_try](const boost::system::error_code& ec, tcp::resolver::results_type r) {
          self->OnResolved(this_try, ec, r);
        });
  }

  void OnResolved(int this_try, const boost::system::error_code& ec,
                  const tcp::resolver::results_type& results) {
    if (this_try != current_try || done) return;  // a try that timed out
    if (ec) return Fail(this_try, Failure::kResolve, ec.message());
    bool local = false;
    for (const auto& entry : results) local |= IsLocalAddress(entry.endpoint().address());
    if (local) return Answered();
    auto self = shared_from_this();
    asio::async_connect(socket, results,
                        [self, this_try](const boost::system::error_code& e, const tcp::endpoint&) {
                          if (this_try != self->current_try || self->done) return;
                          if (e) return self->Fail(this_try, Failure::kConnect, e.message());
                          self->Answered();
                        });
  }

  void Answered() {
    done = true;
    failure = Failure::kNone;
    try_timer.cancel();
  }

  // Records why try `this_try` failed; tries again a second later (at the
  // end of the wait at the latest) while the wait lasts, else the probe is
  // done, with its failure.
  void Fail(int this_try, Failure why, const std::string& message) {
    failure = why;
    error = message;
    try_timer.cancel();
    ++current_try;  // what the failed try still delivers is ignored
    const Clock::time_point now = Clock::now();
    if (now >= wait_until) {
      done = true;
      return;
    }
    if (this_try == 1 && waiting) waiting(*this);
    auto self = shared_from_this();
    retry_timer.expires_after(
        std::min<Clock::duration>(Millis(kSshRetrySeconds), wait_until - now));
    retry_timer.async_wait([self](const boost::system::error_code& ec) {
      if (ec) return;
      boost::system::error_code ignored;
      self->socket.close(ignored);
      self->Start();
    });
  }

  // The last try's failure, in a few words.
  std::string LastFailure() const {
    switch (failure) {
      case Failure::kResolve:
        return "the name does not resolve: " + error;
      case Failure::kConnect:
        return error;
      case Failure::kTimeout:
        return "no answer within " + std::to_string(static_cast<int>(try_seconds)) +
               " s (--start-timeout)";
      case Failure::kNone:
        break;
    }
    return "";
  }

  const std::string host;
  const int port;
  const double try_seconds;
  const Clock::time_point wait_until;
  std::function<void(const Probe&)> waiting;  // told of the first failure when kolorun waits
  tcp::resolver resolver;
  tcp::socket socket;
  asio::steady_timer try_timer, retry_timer;
  int current_try = 0;  // the try whose results count (1 for the first)
  Failure failure = Failure::kNone;
  std::string error;  // the system's words for the last failure
  bool done = false;
};

// The line for a host whose probe failed: with no wait, what the one try
// found; after a wait, how long kolorun waited and what the last try found.
std::string ProbeProblem(const Probe& p, double wait_seconds) {
  const std::string port = std::to_string(p.port);
  if (wait_seconds > 0) {
    std::ostringstream waited;
    waited << wait_seconds;
    return "host '" + p.host + "': nothing answered on ssh port " + port + " for " + waited.str() +
           " s (--ssh-wait; the last try: " + p.LastFailure() +
           "); is the host up, and sshd running there?";
  }
  switch (p.failure) {
    case Probe::Failure::kResolve:
      return "host '" + p.host + "' does not resolve (" + p.error +
             "); check the name in -H / the hostfile";
    case Probe::Failure::kConnect:
      return "host '" + p.host + "': nothing answers on ssh port " + port + " (" + p.error +
             "); is sshd running there, or does it use another port (-p)?";
    case Probe::Failure::kTimeout:
    case Probe::Failure::kNone:
      break;
  }
  return "host '" + p.host + "': no answer on ssh port " + port + " within " +
         std::to_string(static_cast<int>(p.try_seconds)) +
         " s (--start-timeout); is the host up and reachable?";
}

}  // namespace

bool IsLocalHost(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && IsLocalAddress(address);
}

Status CheckHosts(const std::vector<HostSlots>& hosts, int ssh_port, double timeout_seconds,
                  double wait_seconds, const std::function<void(const std::string&)>& waiting) {
  asio::io_context io;
  const Clock::time_point wait_until = Clock::now() + Millis(wait_seconds);
  std::vector<std::shared_ptr<Probe>> probes;
  for (const HostSlots& h : hosts) {
    if (IsLocalHost(h.host)) continue;
    probes.push_back(std::make_shared<Probe>(io, h.host, ssh_port > 0 ? ssh_port : 22,
                                             timeout_seconds, wait_until));
    if (waiting) {
      probes.back()->waiting = [&waiting, wait_seconds](const Probe& p) {
        std::ostringstream line;
        line << "waiting up to " << wait_seconds << " s (--ssh-wait) for ssh on host '" << p.host
             << "' (port " << p.port << "): " << p.LastFailure();
        waiting(line.str());
      };
    }
    probes.back()->Start();
  }
  // Every probe ends by itself; this bound only guards against a resolver
  // that never returns.
  io.run_for(Millis(wait_seconds + timeout_seconds + 2 * kSshRetrySeconds));
  std::string problems;
  for (const auto& p : probes) {
    if (p->done && p->failure == Probe::Failure::kNone) continue;
    if (!p->done) p->failure = Probe::Failure::kTimeout;
    problems += (problems.empty() ? "" : "\nkolorun: ") + ProbeProblem(*p, wait_seconds);
  }
  if (!problems.empty()) return Status::InvalidArgument(problems);
  return Status::OK();
}

namespace {

// The interface that holds local address `a`, or ""; with its IPv4 network
// in CIDR notation in `*subnet` ("" for IPv6).
std::string InterfaceOf(const asio::ip::address& a, std::string* subnet) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char buf[NI_MAXHOST];
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(i->ifa_addr, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    boost::system::error_code ec;
    auto local = asio::ip::make_address(std::string(buf).substr(0, std::string(buf).find('%')), ec);
    if (ec || local != a) continue;
    name = i->ifa_name;
    if (family == AF_INET && i->ifa_netmask != nullptr) {
      const uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
      const uint32_t network = a.to_v4().to_uint() & mask;
      *subnet = asio::ip::address_v4(network).to_string() + "/" +
                std::to_string(__builtin_popcount(mask));
    }
  }
  freeifaddrs(list);
  return name;
}

}  // namespace

Result<JobNetwork> NetworkReaching(const std::vector<HostSlots>& hosts) {
  asio::io_context io;
  udp::resolver resolver(io);
  JobNetwork net;
  for (const HostSlots& h : hosts) {
    if (IsLocalHost(h.host)) continue;
    boost::system::error_code ec;
    auto results = resolver.resolve(h.host, "9", ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("host '" + h.host + "' does not resolve (" + ec.message() +
                                     ")");
    }
    // A UDP "connection" sends nothing; it asks the routing table which local address is used.
    udp::socket probe(io);
    probe.connect(results.begin()->endpoint(), ec);
    if (ec) {
      return Status::InvalidArgument("no route to host '" + h.host + "' (" + ec.message() +
                                     "); name the interface with --network-interface");
    }
    const asio::ip::address local = probe.local_endpoint(ec).address();
    std::string subnet;
    const std::string name = InterfaceOf(local, &subnet);
    if (ec || name.empty()) continue;
    if (net.address.empty()) net.address = local.to_string();
    if (std::find(net.interfaces.begin(), net.interfaces.end(), name) == net.interfaces.end()) {
      net.interfaces.push_back(name);
    }
    if (!subnet.empty() &&
        std::find(net.subnets.begin(), net.subnets.end(), subnet) == net.subnets.end()) {
      net.subnets.push_back(subnet);
    }
  }
  return net;
}

Result<std::string> InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Status::Internal("cannot list this machine's interfaces");
  std::string address;
  for (ifaddrs* i = list; i != nullptr && address.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || name != i->ifa_name)
      continue;
    char buf[NI_MAXHOST];
    if (getnameinfo(i->ifa_addr, sizeof(sockaddr_in), buf, sizeof buf, nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      address = buf;
    }
  }
  freeifaddrs(list);
  if (address.empty()) {
    return Status::InvalidArgument("--network-interface " + name +
                                   ": this machine has no interface of that name with an IPv4 "
                                   "address (ip -br addr lists them)");
  }
  return address;
}

namespace {

// One remote check: the remote shell as a child in its own process group,
// its stdout and stderr on one pipe.
struct RemoteCheck {
  std::string host;
  pid_t pid = -1;
  int fd = -1;
  std::string output;
};

RemoteCheck StartRemoteCheck(const std::string& host, const std::vector<std::string>& argv) {
  RemoteCheck c;
  c.host = host;
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return c;
  c.pid = fork();
  if (c.pid == 0) {
    setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    int devnull = open("/dev/null", O_RDONLY);  // never a prompt on kolorun's terminal
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "cannot run '%s': %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  c.fd = c.pid > 0 ? out[0] : -1;
  if (c.pid < 0) close(out[0]);
  return c;
}

// Reads every check's output until all have ended or the time is up.
void CollectRemoteChecks(std::vector<RemoteCheck>& checks, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  for (;;) {
    std::vector<pollfd> fds;
    for (const RemoteCheck& c : checks) {
      if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (fds.empty() || left <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (RemoteCheck& c : checks) {
      for (const pollfd& p : fds) {
        if (p.fd != c.fd || !(p.revents & (POLLIN | POLLHUP))) continue;
        char buf[4096];
        ssize_t n = read(c.fd, buf, sizeof buf);
        if (n > 0 && c.output.size() < 65536) c.output.append(buf, static_cast<size_t>(n));
        if (n <= 0) {
          close(c.fd);
          c.fd = -1;
        }
      }
    }
  }
}

// The last line that the remote shell printed (ssh's own error, usually).
std::string LastLine(const std::string& text) {
  std::istringstream lines(text);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  return last;
}

// Ends one remote check and returns its problems, one per line ("" for none).
std::string RemoteCheckResult(RemoteCheck& c, const ProgramCheck& check, const RemoteShell& shell,
                              double timeout_seconds) {
  const bool answered = c.fd < 0;  // its output ended; else the time ran out
  int status = 0;
  if (c.pid > 0) {
    if (!answered) kill(-c.pid, SIGKILL);
    while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (c.fd >= 0) close(c.fd);
  std::vector<std::pair<ProgramState, std::string>> found;
  if (ParseRemoteCheck(c.output, &found)) {
    std::string lines;
    for (const auto& [state, p] : found) {
      lines += (lines.empty() ? "" : "\n") + ProgramProblemMessage(c.host, check, state, p);
    }
    return lines;
  }
  std::string said = LastLine(c.output);
  while (!said.empty() && (said.back() == '.' || said.back() == ' ')) said.pop_back();
  if (said.empty()) {
    said = answered
               ? "it ended with code " + std::to_string(WEXITSTATUS(status)) + ", saying nothing"
               : "no answer within " + std::to_string(static_cast<int>(timeout_seconds)) +
                     " s (--start-timeout)";
  }
  return "host '" + c.host + "': cannot check the program there through " +
         (shell.agent.empty() ? std::string("ssh") : shell.agent.front()) + ": " + said +
         "; can this user log in there without a password?";
}

}  // namespace

std::vector<std::string> CheckPrograms(const std::vector<HostSlots>& hosts,
                                       const ProgramCheck& check, const RemoteShell& shell,
                                       double timeout_seconds) {
  std::vector<std::string> problems;
  std::vector<RemoteCheck> remote;
  bool local_done = false;
  const std::string command = RemoteCheckCommand(check);
  for (const HostSlots& h : hosts) {
    if (!IsLocalHost(h.host)) {
      remote.push_back(
          StartRemoteCheck(h.host, RemoteShellArgv(shell.agent, h.host, shell.ssh_port,
                                                   shell.identity_file, command, timeout_seconds)));
      continue;
    }
    if (local_done) continue;
    local_done = true;
    for (const std::string& p : check.Programs()) {
      ProgramState state = LocalProgramState(p, check.path, check.cwd);
      if (!state.empty()) problems.push_back(ProgramProblemMessage(h.host, check, state, p));
    }
  }
  CollectRemoteChecks(remote, timeout_seconds);
  for (RemoteCheck& c : remote)
    problems.push_back(RemoteCheckResult(c, check, shell, timeout_seconds));
  problems.erase(std::remove(problems.begin(), problems.end(), ""), problems.end());
  return problems;
}

}  // namespace kolo::launcher
