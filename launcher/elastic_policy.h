// Elastic mode's decisions, as pure functions of values (tested without
// processes): the pool of hosts with its
// blacklist (Horovod's HostManager and its cooldown rule), the size of the
// next incarnation, the answer to a rank's CHECK, and what kolorun does when
// an incarnation ends. The loop that runs incarnations is elastic.cc.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"
#include "kolo/status.h"

namespace kolo::launcher {

// Horovod's default --elastic-timeout (horovod/runner/elastic/driver.py).
constexpr double kDefaultElasticTimeout = 600;
// Horovod's bounds on --blacklist-cooldown-range (discovery.py).
constexpr int kMinCooldownSeconds = 1;
constexpr int kMaxCooldownSeconds = 3600;

// --blacklist-cooldown-range MIN MAX, in seconds.
struct CooldownRange {
  int min_seconds = 0;
  int max_seconds = 0;
};

struct ElasticSettings {
  int np = 0;                             // slots needed before the first incarnation starts
  int min_np = 0;                         // slots needed before any later one starts
  int max_np = 0;                         // 0: no bound
  int reset_limit = -1;                   // -1: no limit
  std::optional<CooldownRange> cooldown;  // none: blacklisted for the rest of the job
  double timeout_seconds = kDefaultElasticTimeout;
};

// Checks the flags against each other and fills the defaults: min-np is
// -np's, -np is min-np's; one of them must be given. `given_np` is 0 when
// -np was not given.
Result<ElasticSettings> MakeElasticSettings(int given_np, int min_np, int max_np, int reset_limit,
                                            const std::vector<int>& cooldown_range,
                                            double timeout_seconds);

// The hosts kolorun may use and those it will not (Horovod's HostManager):
// hosts come from discovery (or the fixed pool) and keep their order, so
// that the oldest hosts keep the lowest ranks (rank 0 on a host that holds
// the committed state); a new host, or one back from the blacklist, joins at
// the end. A host whose rank failed is blacklisted for the rest of the job,
// or with a cooldown range for Horovod's cooldown: MIN * 2^n + r * MIN
// seconds for its n-th blacklisting (r uniform in [0, 1)), kept within
// [MIN, MAX]; it comes back when discovery lists it after that.
class HostPool {
 public:
  explicit HostPool(std::optional<CooldownRange> cooldown) : cooldown_(cooldown) {}

  // The hosts discovery lists now, in its order. Returns true when the list changed.
  bool Update(const std::vector<HostSlots>& discovered);
  // Blacklists `host` at time `now` (seconds); `random01` in [0, 1) draws the
  // cooldown. Returns the cooldown in seconds, or -1 for the rest of the job.
  double Blacklist(const std::string& host, double now, double random01);
  // The hosts that may get ranks at `now`, in rank order (which it keeps:
  // a host listed once keeps its place while it stays usable).
  std::vector<HostSlots> Available(double now);
  // The blacklisted hosts still out at `now`.
  std::vector<std::string> Blacklisted(double now) const;
  const std::vector<HostSlots>& discovered() const { return discovered_; }

 private:
  struct HostState {
    bool blacklisted = false;
    int times = 0;             // how often it was blacklisted with a cooldown
    double cooldown_end = -1;  // -1: blacklisted for good (when blacklisted)
  };
  bool Out(const std::string& host, double now) const;

  std::optional<CooldownRange> cooldown_;
  std::vector<HostSlots> discovered_;
  std::vector<std::string> order_;  // rank order of the hosts ever usable
  std::map<std::string, HostState> states_;
};

// The next incarnation's hosts: the available ones filled in order, up to
// max_np slots (0: all).
std::vector<HostSlots> ChooseIncarnationHosts(const std::vector<HostSlots>& available, int max_np);

// What a rank's CHECK hears: whether the hosts kolorun would use now differ
// from the running incarnation's.
enum class HostUpdate { kSame, kAdded, kRemoved, kBoth };
// kRemoved: a host of `running` is gone from `available` or has fewer slots
// than it runs; kAdded: more slots are available than `running` has, while
// it has fewer than max_np (0: no bound).
HostUpdate CompareHosts(const std::vector<HostSlots>& running,
                        const std::vector<HostSlots>& available, int max_np);
// In place (Open MPI 5): the slots that new processes may fill in the running
// job, without a restart: those of ChooseIncarnationHosts(available, max_np)
// that `running` lacks, leaving out the hosts of `refused` (whose new
// processes did not join before), as CHECK's "GROW" offers them:
// "host:n,+host2:m", where "+" marks a host that `allocated` (mpirun's hosts)
// lacks, which PRRTE must add; only when `can_add_hosts` (a job started on
// this machine alone runs its transports on loopback: another host grows it
// through a restart). "" when there are none.
std::string GrowthInPlace(const std::vector<HostSlots>& running,
                          const std::vector<HostSlots>& available, int max_np,
                          const std::vector<HostSlots>& allocated,
                          const std::vector<std::string>& refused, bool can_add_hosts);
// "SAME", "UPDATED added", "UPDATED removed", "UPDATED both" (the reply's words).
std::string CheckReply(HostUpdate update);
// "hosts added", "hosts removed", "hosts added and removed", "no change".
std::string DescribeUpdate(HostUpdate update);

// How one incarnation ended, as the loop saw it.
struct IncarnationEnd {
  bool stopped = false;                   // kolorun was stopped (a signal) or ended the job itself
  bool mpirun_ok = false;                 // mpirun exited 0
  bool restart_requested = false;         // rank 0 said RESTART for this incarnation
  std::vector<std::string> failed_hosts;  // hosts to blacklist (empty: none known)
};

enum class NextStep {
  kFinish,               // the job is done (or ended the ordinary way): report and exit
  kRestart,              // a RESTART: start the next incarnation on the hosts there now
  kRestartAfterFailure,  // blacklist failed_hosts, wait for min_np slots, start the next
  kResetLimitReached,    // a restart is needed but --reset-limit resets were done
  kEveryHostFailed,      // every host of the incarnation is blacklisted
};

// What to do next. `resets` is the restarts done so far; `running` the hosts
// of the incarnation that ended. Horovod counts every restart as a reset
// (after a failure, and for a change of hosts); the first start is none.
NextStep DecideNext(const IncarnationEnd& end, const std::vector<HostSlots>& running, int resets,
                    int reset_limit);

}  // namespace kolo::launcher
