// The rendezvous: every rank registers with kolorun when it starts, over TCP,
// presenting the job's random token. kolorun then knows which ranks started,
// where, and can end the job with a clear message when a rank does not start
// within --start-timeout or two processes claim the same rank.
//
// Message (one line, at most kMaxMessageBytes): "KOLO1 <token> <rank> <local_rank> <host> <pid>\n"
// Reply: "OK\n" or "ERR <reason>\n".
//
// In elastic mode (elastic.h) the same server answers rank 0's verbs, one
// request line per connection (the contract between kolorun and the workers):
//   "KOLOE <token> CHECK <g>\n"                  -> "OK SAME\n" | "OK UPDATED added|removed|both\n"
//   "KOLOE <token> RESTART <g> <commit>\n"       -> "OK\n"
//   "KOLOE <token> RESUMED <g> <commit> <size>\n" -> "OK\n"
// and a malformed request or a bad token gets "ERR <reason>\n". Each
// incarnation's ranks register again (NewIncarnation).
//
// With the monitor on, every rank also sends its counters once a second, one
// "KOLOM <token> ..." line per connection (runtime/metrics_snapshot.h), which
// the server hands to the monitor's sink.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

constexpr size_t kMaxMessageBytes = 1024;  // a rank's snapshot (KOLOM) is the longest

struct Registration {
  int rank = -1;
  int local_rank = -1;
  std::string host;
  long pid = 0;
};

// Parses and checks one message (without its newline) against the job's token.
Result<Registration> ParseRegistration(const std::string& line, const std::string& token, int np);
std::string RegistrationMessage(const std::string& token, const Registration& r);

// A random token of 32 hex digits from the system's random source.
std::string NewToken();

// One of rank 0's elastic verbs.
struct ElasticRequest {
  enum class Verb { kCheck, kRestart, kResumed, kShrunk, kGrew, kNotJoined };
  Verb verb = Verb::kCheck;
  int generation = 0;
  long commit = -1;   // RESTART, RESUMED: -1 = no commit
  int size = 0;       // RESUMED; SHRUNK: the survivors; GREW: the grown job
  std::string slots;  // GREW, NOTJOINED: the new processes' hosts ("host:n,...")
};

// Parses and checks one elastic request (without its newline) against the token.
Result<ElasticRequest> ParseElasticRequest(const std::string& line, const std::string& token);
std::string ElasticRequestMessage(const std::string& token, const ElasticRequest& r);

// A RESTART, RESUMED or accepted SHRUNK as the server received it.
struct ElasticEvent {
  ElasticRequest request;
  std::chrono::steady_clock::time_point when;
};

class RendezvousServer {
 public:
  RendezvousServer(std::string token, int np);
  ~RendezvousServer();
  // Listens on `address` (port chosen by the system); returns the port.
  Result<int> Start(const std::string& address);
  void Stop();

  struct Snapshot {
    std::map<int, Registration> registered;
    std::string fatal;               // e.g. two processes claim one rank
    std::vector<std::string> notes;  // rejected connections, to log
  };
  // What happened so far; `notes` are handed out once.
  Snapshot Take();
  // The RESTART and RESUMED requests received since the last call.
  std::vector<ElasticEvent> TakeElasticEvents();

  // Incarnation `generation` of `np` ranks starts; the registrations of the
  // one before are forgotten. Generation -1 is a job without elastic mode,
  // which the server is until told otherwise: it refuses the elastic verbs.
  void NewIncarnation(int generation, int np);
  // What CHECK for incarnation `generation` answers ("SAME", "UPDATED added",
  // "GROW host:n,...", ...); ignored when the server has moved past it (an
  // accepted SHRUNK or GREW answers SAME until the loop has seen it).
  void SetCheckReply(const std::string& reply, int generation);
  // Whether SHRUNK (the in-place path: the survivors of a lost rank go on in
  // the same processes) is accepted: `refusal` "" accepts it from at least
  // `min_size` survivors, which then run as the next generation (the server
  // moves to it at once, so that their RESUMED is in time); else SHRUNK is
  // answered "ERR <refusal>". Refused until set.
  void SetShrinkPolicy(const std::string& refusal, int min_size);
  // Where "KOLOM" lines go: `sink` returns the reply ("OK\n", "ERR <reason>\n").
  // Without a sink they are refused.
  using MonitorSink = std::function<std::string(const std::string& line)>;
  void SetMonitorSink(MonitorSink sink);
  // Told of every RESTART and RESUMED as it is accepted (the monitor shows
  // them), on the server's thread; TakeElasticEvents still hands them out.
  using ElasticEventSink = std::function<void(const ElasticEvent&)>;
  void SetElasticEventSink(ElasticEventSink sink);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Sends a registration to host:port; returns the server's error, if any.
Status Register(const std::string& address, int port, const std::string& message,
                double timeout_seconds);

}  // namespace kolo::launcher
