#include "preflight.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <memory>

namespace kolo::launcher {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

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

}  // namespace kolo::launcher
