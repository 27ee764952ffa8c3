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

// One probe: resolve, then connect to the ssh port unless the host is local.
struct Probe : std::enable_shared_from_this<Probe> {
  Probe(asio::io_context& io, std::string h, int p)
      : host(std::move(h)), port(p), resolver(io), socket(io) {}
  void Start() {
    auto self = shared_from_this();
    resolver.async_resolve(host, std::to_string(port),
                           [self](const boost::system::error_code& ec,
                                  tcp::resolver::results_type r) { self->OnResolved(ec, r); });
  }
  void OnResolved(const boost::system::error_code& ec, const tcp::resolver::results_type& results) {
    if (ec) {
      problem = "host '" + host + "' does not resolve (" + ec.message() +
                "); check the name in -H / the hostfile";
      done = true;
      return;
    }
    bool local = false;
    for (const auto& entry : results) local |= IsLocalAddress(entry.endpoint().address());
    if (local) {
      done = true;
      return;
    }
    auto self = shared_from_this();
    asio::async_connect(
        socket, results, [self](const boost::system::error_code& e, const tcp::endpoint&) {
          if (e) {
            self->problem = "host '" + self->host + "': nothing answers on ssh port " +
                            std::to_string(self->port) + " (" + e.message() +
                            "); is sshd running there, or does it use another port (-p)?";
          }
          self->done = true;
        });
  }
  std::string host;
  int port;
  tcp::resolver resolver;
  tcp::socket socket;
  std::string problem;
  bool done = false;
};

}  // namespace

bool IsLocalHost(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && IsLocalAddress(address);
}

Status CheckHosts(const std::vector<HostSlots>& hosts, int ssh_port, double timeout_seconds) {
  asio::io_context io;
  std::vector<std::shared_ptr<Probe>> probes;
  for (const HostSlots& h : hosts) {
    if (IsLocalHost(h.host)) continue;
    probes.push_back(std::make_shared<Probe>(io, h.host, ssh_port > 0 ? ssh_port : 22));
    probes.back()->Start();
  }
  io.run_for(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  for (const auto& p : probes) {
    if (!p->problem.empty()) return Status::InvalidArgument(p->problem);
    if (!p->done) {
      return Status::InvalidArgument("host '" + p->host + "': no answer on ssh port " +
                                     std::to_string(p->port) + " within " +
                                     std::to_string(static_cast<int>(timeout_seconds)) +
                                     " s (--start-timeout); is the host up and reachable?");
    }
  }
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
