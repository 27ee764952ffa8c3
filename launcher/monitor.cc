#include "monitor.h"

#include <fcntl.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <mutex>
#include <thread>

namespace kolo::launcher {

extern const char kMonitorPage[];  // monitor_page.html, embedded by the build

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr const char* kStateMarker = "/*KOLO_STATE*/null";

// Compares without stopping at the first difference.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The value of `key` in the target's query string, or "".
std::string QueryValue(const std::string& target, const std::string& key) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  const std::string query = target.substr(q + 1);
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string pair = query.substr(start, end - start);
    if (pair.rfind(key + "=", 0) == 0) return pair.substr(key.size() + 1);
    start = end + 1;
  }
  return "";
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  if (address == "localhost") return true;
  boost::system::error_code ec;
  asio::ip::address a = asio::ip::make_address(address, ec);
  return !ec && a.is_loopback();
}

std::string RenderPage(const std::string& state_json) {
  std::string page = kMonitorPage;
  const size_t at = page.find(kStateMarker);
  if (at != std::string::npos) page.replace(at, std::strlen(kStateMarker), state_json);
  return page;
}

class Monitor::Guarded {
 public:
  Guarded(const std::string& token) : state(Clock::now(), token) {}
  std::mutex mu;
  MonitorState state;  // guarded by mu
};

// One thread: accepts, reads one request per connection, answers, closes.
class Monitor::Server {
 public:
  Server(Monitor* owner, std::string token) : owner_(owner), token_(std::move(token)) {}

  Result<int> Start(const MonitorAddress& where) {
    boost::system::error_code ec;
    const std::string host = where.host == "localhost" ? "127.0.0.1" : where.host;
    tcp::endpoint ep(asio::ip::make_address(host, ec), static_cast<unsigned short>(where.port));
    if (ec) {
      return Status::InvalidArgument("--monitor-address '" + where.host +
                                     "' is not an IP address: " + ec.message());
    }
    acceptor_.open(ep.protocol(), ec);
    if (!ec) fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);  // not for mpirun
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::Internal("the monitor cannot listen on " + where.host + ":" +
                              std::to_string(where.port) + ": " + ec.message());
    }
    require_token_ = !IsLoopbackAddress(where.host);
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void Stop() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }
  bool require_token() const { return require_token_; }

 private:
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    beast::flat_buffer buffer{8192};
    http::request<http::string_body> request;
    http::response<http::string_body> response;
  };

  void Accept() {
    auto c = std::make_shared<Connection>(io_);
    acceptor_.async_accept(c->socket, [this, c](const boost::system::error_code& ec) {
      if (ec) return;  // stopped
      Read(c);
      Accept();
    });
  }

  void Read(const std::shared_ptr<Connection>& c) {
    c->timer.expires_after(std::chrono::seconds(10));
    c->timer.async_wait([c](const boost::system::error_code& ec) {
      if (!ec) c->socket.close();
    });
    http::async_read(c->socket, c->buffer, c->request,
                     [this, c](const boost::system::error_code& ec, size_t) {
                       if (ec) {
                         c->socket.close();
                         return;
                       }
                       Answer(c);
                     });
  }

  void Answer(const std::shared_ptr<Connection>& c) {
    const http::request<http::string_body>& req = c->request;
    http::response<http::string_body>& res = c->response;
    res.version(req.version());
    res.keep_alive(false);
    res.set(http::field::server, "kolorun");
    res.set(http::field::cache_control, "no-store");
    res.set("X-Content-Type-Options", "nosniff");
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    std::string type = "text/plain; charset=utf-8";
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "GET, HEAD");
      res.body() = "kolorun's monitor is read-only: GET only\n";
    } else if (require_token_ && !Authorized(req, target)) {
      res.result(http::status::unauthorized);
      res.set(http::field::www_authenticate, "Bearer");
      res.body() =
          "kolorun's monitor listens beyond loopback and needs the token that kolorun printed: "
          "add ?token=... to the address or send 'Authorization: Bearer ...'\n";
    } else if (path == "/" || path == "/index.html") {
      type = "text/html; charset=utf-8";
      res.set("Content-Security-Policy",
              "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
              "img-src 'self' data:; connect-src 'self'");
      res.body() = RenderPage(owner_->Json());
    } else if (path == "/metrics") {
      type = "text/plain; version=0.0.4; charset=utf-8";
      res.body() = owner_->Prometheus();
    } else if (path == "/api/v1/state") {
      type = "application/json";
      res.body() = owner_->Json();
    } else {
      res.result(http::status::not_found);
      res.body() = "not found: kolorun's monitor serves /, /metrics and /api/v1/state\n";
    }
    res.set(http::field::content_type, type);
    res.prepare_payload();
    if (req.method() == http::verb::head) res.body().clear();
    http::async_write(c->socket, res, [c](const boost::system::error_code&, size_t) {
      boost::system::error_code ignored;
      c->socket.shutdown(tcp::socket::shutdown_send, ignored);
      c->timer.cancel();
      c->socket.close(ignored);
    });
  }

  bool Authorized(const http::request<http::string_body>& req, const std::string& target) const {
    std::string given = QueryValue(target, "token");
    auto auth = req.find(http::field::authorization);
    if (given.empty() && auth != req.end()) {
      const std::string value(auth->value());
      if (value.rfind("Bearer ", 0) == 0) given = value.substr(7);
    }
    return !token_.empty() && SameToken(given, token_);
  }

  Monitor* owner_;
  std::string token_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::thread thread_;
  bool require_token_ = false;  // set before the thread starts
};

Monitor::Monitor(std::string rank_token, std::string viewer_token)
    : server_(std::make_unique<Server>(this, viewer_token)),
      state_(std::make_unique<Guarded>(rank_token)),
      viewer_token_(std::move(viewer_token)) {}

Monitor::~Monitor() { Stop(); }

Result<std::string> Monitor::Start(const MonitorAddress& where) {
  KOLO_ASSIGN_OR_RETURN(int port, server_->Start(where));
  const bool v6 = where.host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + where.host + "]" : where.host) + ":" + std::to_string(port) + "/" +
         (server_->require_token() ? "?token=" + viewer_token_ : "");
}

void Monitor::Stop() { server_->Stop(); }

void Monitor::NewJob(const std::vector<std::string>& rank_hosts) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->state.NewJob(rank_hosts, Clock::now());
}

std::string Monitor::Receive(const std::string& line) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->state.Receive(line, Clock::now());
}

void Monitor::AddEvent(const std::string& kind, const std::string& text) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->state.AddEvent(kind, text, Clock::now());
}

void Monitor::Tick() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->state.Tick(Clock::now());
}

std::string Monitor::StatusLine() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->state.StatusLine(Clock::now());
}

std::string Monitor::Prometheus() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->state.Prometheus(Clock::now());
}

std::string Monitor::Json() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->state.Json(Clock::now());
}

}  // namespace kolo::launcher
