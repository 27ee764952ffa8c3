#include "rendezvous.h"

#include <fcntl.h>

#include <boost/asio.hpp>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace kolo::launcher {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Result<long> ParseLong(const std::string& text, const char* what) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(std::string(what) + " '" + text.substr(0, 20) +
                                   "' is not a number");
  }
  return std::stol(text);
}

}  // namespace

Result<Registration> ParseRegistration(const std::string& line, const std::string& token, int np) {
  std::istringstream is(line);
  std::vector<std::string> w;
  for (std::string word; is >> word && w.size() < 8;) w.push_back(word);
  if (w.size() != 6 || w[0] != "KOLO1") {
    return Status::InvalidArgument("malformed registration (expected 6 fields starting KOLO1)");
  }
  if (w[1] != token) return Status::PreconditionFailed("wrong job token");
  Registration r;
  Result<long> rank = ParseLong(w[2], "rank");
  Result<long> local = ParseLong(w[3], "local rank");
  Result<long> pid = ParseLong(w[5], "pid");
  for (const Status* s : {&rank.status(), &local.status(), &pid.status()}) {
    if (!s->ok()) return *s;
  }
  if (rank.value() >= np) {
    return Status::InvalidArgument("rank " + w[2] + " is out of range for " + std::to_string(np) +
                                   " ranks");
  }
  r.rank = static_cast<int>(rank.value());
  r.local_rank = static_cast<int>(local.value());
  r.host = w[4];
  r.pid = pid.value();
  return r;
}

namespace {

// A generation, a commit (-1: none) or a size in an elastic request.
Result<long> ParseSigned(const std::string& text, const char* what, long lowest) {
  if (text == "-1" && lowest <= -1) return -1L;
  Result<long> v = ParseLong(text, what);
  if (!v.ok()) return v.status();
  if (v.value() < lowest) {
    return Status::InvalidArgument(std::string(what) + " must be at least " +
                                   std::to_string(lowest));
  }
  return v;
}

}  // namespace

Result<ElasticRequest> ParseElasticRequest(const std::string& line, const std::string& token) {
  std::istringstream is(line);
  std::vector<std::string> w;
  for (std::string word; is >> word && w.size() < 8;) w.push_back(word);
  if (w.size() < 4 || w[0] != "KOLOE") {
    return Status::InvalidArgument(
        "malformed elastic request (expected KOLOE <token> CHECK|RESTART|RESUMED <generation> "
        "...)");
  }
  if (w[1] != token) return Status::PreconditionFailed("wrong job token");
  ElasticRequest r;
  size_t fields = 0;
  if (w[2] == "CHECK") {
    r.verb = ElasticRequest::Verb::kCheck;
    fields = 4;
  } else if (w[2] == "RESTART") {
    r.verb = ElasticRequest::Verb::kRestart;
    fields = 5;
  } else if (w[2] == "RESUMED") {
    r.verb = ElasticRequest::Verb::kResumed;
    fields = 6;
  } else if (w[2] == "SHRUNK") {
    r.verb = ElasticRequest::Verb::kShrunk;
    fields = 5;
  } else if (w[2] == "GREW") {
    r.verb = ElasticRequest::Verb::kGrew;
    fields = 6;
  } else if (w[2] == "NOTJOINED") {
    r.verb = ElasticRequest::Verb::kNotJoined;
    fields = 5;
  } else {
    return Status::InvalidArgument("unknown elastic verb '" + w[2].substr(0, 20) +
                                   "' (expected CHECK, RESTART, RESUMED, SHRUNK, GREW or "
                                   "NOTJOINED)");
  }
  if (w.size() != fields) {
    return Status::InvalidArgument(w[2] + " expects " + std::to_string(fields - 3) +
                                   " value(s) after the verb");
  }
  Result<long> generation = ParseSigned(w[3], "generation", 0);
  if (!generation.ok()) return generation.status();
  r.generation = static_cast<int>(generation.value());
  if (r.verb == ElasticRequest::Verb::kShrunk || r.verb == ElasticRequest::Verb::kGrew) {
    Result<long> size = ParseSigned(w[4], "size", 1);
    if (!size.ok()) return size.status();
    r.size = static_cast<int>(size.value());
    if (r.verb == ElasticRequest::Verb::kGrew) r.slots = w[5];
    return r;
  }
  if (r.verb == ElasticRequest::Verb::kNotJoined) {
    r.slots = w[4];
    return r;
  }
  if (fields >= 5) {
    Result<long> commit = ParseSigned(w[4], "commit", -1);
    if (!commit.ok()) return commit.status();
    r.commit = commit.value();
  }
  if (fields == 6) {
    Result<long> size = ParseSigned(w[5], "size", 1);
    if (!size.ok()) return size.status();
    r.size = static_cast<int>(size.value());
  }
  return r;
}

std::string ElasticRequestMessage(const std::string& token, const ElasticRequest& r) {
  switch (r.verb) {
    case ElasticRequest::Verb::kCheck:
      return "KOLOE " + token + " CHECK " + std::to_string(r.generation) + "\n";
    case ElasticRequest::Verb::kRestart:
      return "KOLOE " + token + " RESTART " + std::to_string(r.generation) + " " +
             std::to_string(r.commit) + "\n";
    case ElasticRequest::Verb::kResumed:
      return "KOLOE " + token + " RESUMED " + std::to_string(r.generation) + " " +
             std::to_string(r.commit) + " " + std::to_string(r.size) + "\n";
    case ElasticRequest::Verb::kShrunk:
      return "KOLOE " + token + " SHRUNK " + std::to_string(r.generation) + " " +
             std::to_string(r.size) + "\n";
    case ElasticRequest::Verb::kGrew:
      return "KOLOE " + token + " GREW " + std::to_string(r.generation) + " " +
             std::to_string(r.size) + " " + r.slots + "\n";
    case ElasticRequest::Verb::kNotJoined:
      return "KOLOE " + token + " NOTJOINED " + std::to_string(r.generation) + " " + r.slots + "\n";
  }
  return "";
}

std::string RegistrationMessage(const std::string& token, const Registration& r) {
  return "KOLO1 " + token + " " + std::to_string(r.rank) + " " + std::to_string(r.local_rank) +
         " " + r.host + " " + std::to_string(r.pid) + "\n";
}

std::string NewToken() {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {0};
  urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  std::ostringstream os;
  for (unsigned char b : bytes) os << std::hex << std::setw(2) << std::setfill('0') << int{b};
  return os.str();
}

class RendezvousServer::Impl {
 public:
  Impl(std::string token, int np) : token_(std::move(token)), acceptor_(io_), np_(np) {}

  Result<int> Start(const std::string& address) {
    boost::system::error_code ec;
    tcp::endpoint ep(asio::ip::make_address(address, ec), 0);
    if (ec) return Status::InvalidArgument("rendezvous address '" + address + "': " + ec.message());
    acceptor_.open(ep.protocol(), ec);
    // Not inherited by mpirun and the ranks that kolorun starts.
    if (!ec) fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::Internal("cannot listen for ranks on " + address + ": " + ec.message());
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void Stop() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Snapshot Take() {
    std::lock_guard<std::mutex> lock(mu_);
    Snapshot s = state_;
    state_.notes.clear();
    return s;
  }

  std::vector<ElasticEvent> TakeElasticEvents() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ElasticEvent> events;
    events.swap(events_);
    return events;
  }

  void NewIncarnation(int generation, int np) {
    std::lock_guard<std::mutex> lock(mu_);
    generation_ = generation;
    np_ = np;
    check_reply_ = "SAME";
    state_.registered.clear();
    state_.fatal.clear();
  }

  void SetCheckReply(const std::string& reply, int generation) {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation == generation_) check_reply_ = reply;
  }

  void SetShrinkPolicy(const std::string& refusal, int min_size) {
    std::lock_guard<std::mutex> lock(mu_);
    shrink_refusal_ = refusal;
    shrink_min_size_ = min_size;
  }

  void SetMonitorSink(MonitorSink sink) {
    std::lock_guard<std::mutex> lock(mu_);
    monitor_sink_ = std::move(sink);
  }

  void SetElasticEventSink(ElasticEventSink sink) {
    std::lock_guard<std::mutex> lock(mu_);
    elastic_sink_ = std::move(sink);
  }

 private:
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::string buffer;
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
    // A connection that says nothing is dropped after a few seconds.
    c->timer.expires_after(std::chrono::seconds(5));
    c->timer.async_wait([c](const boost::system::error_code& ec) {
      if (!ec) c->socket.close();
    });
    asio::async_read_until(
        c->socket, asio::dynamic_buffer(c->buffer, kMaxMessageBytes), '\n',
        [this, c](const boost::system::error_code& ec, size_t n) { OnMessage(c, ec, n); });
  }

  void OnMessage(const std::shared_ptr<Connection>& c, const boost::system::error_code& ec,
                 size_t n) {
    c->timer.cancel();
    boost::system::error_code ignored;
    std::string peer = "?";
    auto ep = c->socket.remote_endpoint(ignored);
    if (!ignored) peer = ep.address().to_string() + ":" + std::to_string(ep.port());
    std::string reply;
    if (ec) {
      Note("rejected a connection from " + peer + ": " +
           (ec == asio::error::not_found
                ? "message longer than " + std::to_string(kMaxMessageBytes) + " bytes"
                : "no complete message (" + ec.message() + ")"));
      reply = "ERR bad message\n";
    } else if (c->buffer.rfind("KOLOE ", 0) == 0) {
      reply = Elastic(c->buffer.substr(0, n - 1), peer);
    } else if (c->buffer.rfind("KOLOM ", 0) == 0) {
      reply = Monitor(c->buffer.substr(0, n - 1), peer);
    } else {
      Result<Registration> r = ParseRegistration(c->buffer.substr(0, n - 1), token_, Np());
      if (!r.ok()) {
        Note("refused a registration from " + peer + ": " + r.status().message());
        reply = "ERR " + r.status().message() + "\n";
      } else {
        reply = Accepted(r.value());
      }
    }
    auto out = std::make_shared<std::string>(reply);
    asio::async_write(c->socket, asio::buffer(*out),
                      [c, out](const boost::system::error_code&, size_t) { c->socket.close(); });
  }

  std::string Accepted(const Registration& r) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = state_.registered.find(r.rank);
    if (it != state_.registered.end()) {
      if (state_.fatal.empty()) {
        state_.fatal = "two processes claim rank " + std::to_string(r.rank) + ": pid " +
                       std::to_string(it->second.pid) + " on host " + it->second.host +
                       " and pid " + std::to_string(r.pid) + " on host " + r.host;
      }
      return "ERR rank " + std::to_string(r.rank) + " is already registered\n";
    }
    state_.registered[r.rank] = r;
    return "OK\n";
  }

  int Np() {
    std::lock_guard<std::mutex> lock(mu_);
    return np_;
  }

  // One elastic request: the reply, and RESTART / RESUMED / SHRUNK kept for the loop.
  std::string Elastic(const std::string& line, const std::string& peer) {
    Result<ElasticRequest> r = ParseElasticRequest(line, token_);
    if (!r.ok()) {
      Note("refused an elastic request from " + peer + ": " + r.status().message());
      return "ERR " + r.status().message() + "\n";
    }
    ElasticEventSink sink;
    ElasticEvent event{r.value(), std::chrono::steady_clock::now()};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (generation_ < 0) return "ERR kolorun is not in elastic mode\n";
      if (r.value().generation != generation_) {
        return "ERR generation " + std::to_string(r.value().generation) +
               " is not the running one (" + std::to_string(generation_) + ")\n";
      }
      if (r.value().verb == ElasticRequest::Verb::kCheck) return "OK " + check_reply_ + "\n";
      if (r.value().verb == ElasticRequest::Verb::kShrunk) {
        if (!shrink_refusal_.empty()) return "ERR " + shrink_refusal_ + "\n";
        if (r.value().size < shrink_min_size_) {
          return "ERR " + std::to_string(r.value().size) + " ranks are left, fewer than --min-np " +
                 std::to_string(shrink_min_size_) +
                 "; the job restarts once enough slots are there\n";
        }
        ++generation_;  // the survivors' RESUMED comes as the next generation's
        check_reply_ = "SAME";
      }
      if (r.value().verb == ElasticRequest::Verb::kGrew) {
        ++generation_;  // the grown job's RESUMED comes as the next generation's
        check_reply_ = "SAME";
      }
      if (r.value().verb == ElasticRequest::Verb::kNotJoined) check_reply_ = "SAME";
      events_.push_back(event);
      sink = elastic_sink_;
    }
    if (sink) sink(event);  // outside the lock: the monitor takes its own
    return "OK\n";
  }

  // A rank's counters: to the monitor, outside the lock.
  std::string Monitor(const std::string& line, const std::string& peer) {
    MonitorSink sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sink = monitor_sink_;
    }
    if (!sink) return "ERR kolorun's monitor is off\n";
    std::string reply = sink(line);
    if (reply.rfind("ERR", 0) == 0) {
      Note("refused counters from " + peer + ": " + reply.substr(0, reply.size() - 1));
    }
    return reply;
  }

  void Note(const std::string& note) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.notes.push_back(note);
  }

  std::string token_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::mutex mu_;
  Snapshot state_;                    // guarded by mu_
  int np_;                            // guarded by mu_
  int generation_ = -1;               // guarded by mu_; -1: not elastic
  std::string check_reply_ = "SAME";  // guarded by mu_
  std::string shrink_refusal_ = "kolorun runs this job without in-place recovery";  // mu_
  int shrink_min_size_ = 1;                                                         // mu_
  std::vector<ElasticEvent> events_;  // guarded by mu_
  MonitorSink monitor_sink_;          // guarded by mu_
  ElasticEventSink elastic_sink_;     // guarded by mu_
};

RendezvousServer::RendezvousServer(std::string token, int np)
    : impl_(std::make_unique<Impl>(std::move(token), np)) {}
RendezvousServer::~RendezvousServer() { Stop(); }
Result<int> RendezvousServer::Start(const std::string& address) { return impl_->Start(address); }
void RendezvousServer::Stop() { impl_->Stop(); }
RendezvousServer::Snapshot RendezvousServer::Take() { return impl_->Take(); }
void RendezvousServer::SetShrinkPolicy(const std::string& refusal, int min_size) {
  impl_->SetShrinkPolicy(refusal, min_size);
}

void RendezvousServer::NewIncarnation(int generation, int np) {
  impl_->NewIncarnation(generation, np);
}
std::vector<ElasticEvent> RendezvousServer::TakeElasticEvents() {
  return impl_->TakeElasticEvents();
}
void RendezvousServer::SetCheckReply(const std::string& reply, int generation) {
  impl_->SetCheckReply(reply, generation);
}
void RendezvousServer::SetMonitorSink(MonitorSink sink) { impl_->SetMonitorSink(std::move(sink)); }
void RendezvousServer::SetElasticEventSink(ElasticEventSink sink) {
  impl_->SetElasticEventSink(std::move(sink));
}

Status Register(const std::string& address, int port, const std::string& message,
                double timeout_seconds) {
  asio::io_context io;
  tcp::socket socket(io);
  tcp::resolver resolver(io);
  std::string reply;
  boost::system::error_code result = asio::error::timed_out;
  resolver.async_resolve(
      address, std::to_string(port),
      [&](const boost::system::error_code& ec, tcp::resolver::results_type r) {
        if (ec) {
          result = ec;
          return;
        }
        asio::async_connect(
            socket, r, [&](const boost::system::error_code& e, const tcp::endpoint&) {
              if (e) {
                result = e;
                return;
              }
              asio::async_write(
                  socket, asio::buffer(message), [&](const boost::system::error_code& w, size_t) {
                    if (w) {
                      result = w;
                      return;
                    }
                    asio::async_read_until(
                        socket, asio::dynamic_buffer(reply, 256), '\n',
                        [&](const boost::system::error_code& rd, size_t) { result = rd; });
                  });
            });
      });
  io.run_for(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (result) {
    return Status::Internal("cannot register with kolorun at " + address + ":" +
                            std::to_string(port) + ": " + result.message());
  }
  if (reply.rfind("OK", 0) != 0) {
    return Status::PreconditionFailed("kolorun refused this rank: " +
                                      reply.substr(reply.find(' ') + 1));
  }
  return Status::OK();
}

}  // namespace kolo::launcher
