// kolorun's monitor: the ranks' counters (through the rendezvous, see
// MonitorState) served over HTTP while the job runs, read-only: a page of its
// own (launcher/monitor_page.html, built into kolorun), /metrics in
// Prometheus' text format and /api/v1/state as JSON. Bound to loopback unless
// told otherwise; bound anywhere else, every request must carry the viewer
// token (?token=... or "Authorization: Bearer ..."). One thread serves it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "monitor_state.h"

namespace kolo::launcher {

struct MonitorAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the system chooses
};

// Whether `address` is a loopback address (127.0.0.0/8, ::1, "localhost").
bool IsLoopbackAddress(const std::string& address);
// The page with `state_json` in place of its initial state, so that it shows
// the job at once (and a browser that runs no script still sees the ranks).
std::string RenderPage(const std::string& state_json);

class Monitor {
 public:
  // `rank_token`: the job's token, which the ranks' counters carry.
  // `viewer_token`: what a request must carry when the server is off loopback.
  Monitor(std::string rank_token, std::string viewer_token);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Starts serving; returns the address to open ("http://127.0.0.1:8787/",
  // with ?token=... when one is needed).
  Result<std::string> Start(const MonitorAddress& where);
  void Stop();

  // What kolorun's loop and the rendezvous feed in (thread-safe).
  void NewJob(const std::vector<std::string>& rank_hosts);
  std::string Receive(const std::string& line);  // a "KOLOM" line: the reply
  void AddEvent(const std::string& kind, const std::string& text);
  void Tick();
  std::string StatusLine();
  // The three views, as the server sends them.
  std::string Prometheus();
  std::string Json();

 private:
  class Server;
  std::unique_ptr<Server> server_;
  class Guarded;
  std::unique_ptr<Guarded> state_;
  std::string viewer_token_;
};

}  // namespace kolo::launcher
