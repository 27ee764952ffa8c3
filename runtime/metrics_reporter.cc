#include "metrics_reporter.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "logging.h"
#include "metrics_snapshot.h"

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPeriod = std::chrono::seconds(1);
constexpr int kDeadlineMs = 1000;  // for one whole exchange

// A socket closed when it goes out of scope.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

int MsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = poll(&p, 1, MsLeft(deadline));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

// Sends `line` to address:port and returns the reply's first line ("" when
// kolorun could not be reached in time).
std::string Exchange(const std::string& address, int port, const std::string& line) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(kDeadlineMs);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, freeaddrinfo);
  Socket s(socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return "";
  if (connect(s.fd(), found->ai_addr, found->ai_addrlen) != 0) {
    if (errno != EINPROGRESS || !WaitFor(s.fd(), POLLOUT, deadline)) return "";
    int error = 0;
    socklen_t len = sizeof error;
    if (getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) return "";
  }
  for (size_t sent = 0; sent < line.size();) {
    if (!WaitFor(s.fd(), POLLOUT, deadline)) return "";
    ssize_t n = send(s.fd(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return "";
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string reply;
  while (reply.find('\n') == std::string::npos && reply.size() < 256) {
    if (!WaitFor(s.fd(), POLLIN, deadline)) return "";
    char buf[256];
    ssize_t n = recv(s.fd(), buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return "";
    if (n > 0) reply.append(buf, static_cast<size_t>(n));
  }
  return reply.substr(0, reply.find('\n'));
}

std::string HostName() {
  char name[256] = "?";
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::unique_ptr<MetricsReporter> MetricsReporter::Start(const std::string& target, int rank,
                                                        const Metrics* metrics) {
  if (target.empty()) return nullptr;
  // The configuration checked the form: token@address:port.
  const size_t at = target.find('@'), colon = target.rfind(':');
  std::string address = target.substr(at + 1, colon - at - 1);
  if (address.size() > 2 && address.front() == '[') address = address.substr(1, address.size() - 2);
  return std::unique_ptr<MetricsReporter>(new MetricsReporter(
      target.substr(0, at), address, std::stoi(target.substr(colon + 1)), rank, metrics));
}

MetricsReporter::MetricsReporter(std::string token, std::string address, int port, int rank,
                                 const Metrics* metrics)
    : token_(std::move(token)),
      address_(std::move(address)),
      host_(HostName()),
      port_(port),
      rank_(rank),
      metrics_(metrics) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsReporter::~MetricsReporter() {
  {
    MutexLock lock(&mutex_);
    stop_ = true;
  }
  wake_.Signal();
  if (thread_.joinable()) thread_.join();
}

void MetricsReporter::Loop() {
  auto next = Clock::now();
  for (;;) {
    {
      MutexLock lock(&mutex_);
      while (!stop_ && Clock::now() < next) wake_.WaitFor(&mutex_, next - Clock::now());
      if (stop_) break;
    }
    next += kPeriod;
    if (!SendOnce()) return;
  }
  (void)SendOnce();  // the final counts
}

bool MetricsReporter::SendOnce() {
  RankSnapshot snapshot;
  snapshot.rank = rank_;
  snapshot.host = host_;
  snapshot.sample = metrics_->Sample();
  const std::string reply = Exchange(address_, port_, EncodeSnapshot(token_, snapshot));
  if (reply.rfind("ERR", 0) == 0) {
    KOLO_LOG(kWarning) << "kolorun refused this rank's counters (" << reply
                       << "); the monitor stops receiving them";
    return false;
  }
  return true;  // sent, or kolorun busy or gone: the next second tries again
}

}  // namespace kolo
