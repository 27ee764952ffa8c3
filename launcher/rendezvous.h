// The rendezvous: every rank registers with kolorun when it starts, over TCP,
// presenting the job's random token. kolorun then knows which ranks started,
// where, and can end the job with a clear message when a rank does not start
// within --start-timeout or two processes claim the same rank.
//
// Message (one line, at most kMaxMessageBytes): "KOLO1 <token> <rank> <local_rank> <host> <pid>\n"
// Reply: "OK\n" or "ERR <reason>\n".
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

constexpr size_t kMaxMessageBytes = 512;

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

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Sends a registration to host:port; returns the server's error, if any.
Status Register(const std::string& address, int port, const std::string& message,
                double timeout_seconds);

}  // namespace kolo::launcher
