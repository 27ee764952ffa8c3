#include "elastic.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "discovery.h"
#include "kolo/env_names.h"
#include "options.h"
#include "preflight.h"

namespace kolo::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

void Say(const std::string& line) {
  std::fprintf(stderr, "kolorun: elastic: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string JoinComma(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

std::string Fixed(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// The exit code of a survivor that gave up recovering in place because a
// rank alive did not join the shrink (kolo.common.elastic; EX_TEMPFAIL): it
// is not a cause, the rank that did not answer is.
constexpr int kGaveUpInPlace = 75;

// The rank whose failure ended the job: the first that was not ended by the
// teardown (SIGTERM, SIGINT from mpirun) nor gave up in place, else the first.
const RankExit* Cause(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits) {
    if (e.signal != SIGTERM && e.signal != SIGINT && !(e.signal == 0 && e.code == kGaveUpInPlace))
      return &e;
  }
  return exits.empty() ? nullptr : &exits.front();
}

class ElasticLoop {
 public:
  ElasticLoop(const ElasticRun& run, const PlanIncarnation& plan, RendezvousServer& server)
      : run_(run), plan_(plan), server_(server), pool_(run.settings.cooldown) {
    if (!run.discovery_script.empty()) {
      script_ = std::make_unique<DiscoveryScript>(run.discovery_script, run.slots_per_host);
    }
  }

  int Run() {
    CatchStopSignals();
    if (script_) {
      // The first run must work (Horovod's rule): a script that fails now is misconfigured.
      Result<std::vector<HostSlots>> first = script_->RunNow();
      if (!first.ok()) return Fail(first.status().message());
      pool_.Update(first.value());
      last_discovery_ = Clock::now();
    } else {
      pool_.Update(run_.fixed_pool);
    }
    Say(run_.recovery);  // once the hosts are known to be there: the job will start
    int needed = run_.settings.np;
    const char* needed_flag = "-np";
    for (;;) {
      Result<std::vector<HostSlots>> hosts = WaitForSlots(needed, needed_flag);
      if (!hosts.ok()) return Fail("elastic: " + hosts.status().message(), failure_code_);
      if (!hosts_.empty() && std::none_of(hosts.value().begin(), hosts.value().end(),
                                          [&](const HostSlots& h) { return Ran(h.host); })) {
        return Fail("elastic: no host of incarnation " + std::to_string(generation_ - 1) +
                        " is left to hold its committed state (new hosts: " +
                        FormatHostSpec(hosts.value()) + "); not restarting",
                    failure_code_);
      }
      hosts_ = hosts.value();
      std::optional<int> done = RunIncarnation();
      if (done.has_value()) return *done;
      needed = run_.settings.min_np;
      needed_flag = "--min-np";
    }
  }

 private:
  // Runs incarnation generation_ on hosts_; returns kolorun's exit code when
  // the job ends, or nothing when another incarnation follows.
  std::optional<int> RunIncarnation() {
    const int np = TotalSlots(hosts_);
    Say("starting incarnation " + std::to_string(generation_) + " at np=" + std::to_string(np) +
        " on " + FormatHostSpec(hosts_));
    Result<Job> job = plan_(hosts_, IncarnationVariables(run_.job_id, generation_, run_.in_place));
    if (!job.ok()) return Fail(job.status().message());
    if (generation_ > 0) job.value().append_output = true;
    job.value().ranks_may_fail = run_.in_place;
    server_.NewIncarnation(generation_, np);
    restart_.reset();
    update_ = HostUpdate::kSame;
    rank_hosts_ = job.value().rank_hosts;
    allocated_ = hosts_;
    refused_.clear();
    running_np_ = np;
    handled_exits_ = 0;
    shrunk_.reset();
    resumed_after_shrink_.reset();
    loss_since_.reset();
    unanswering_.clear();
    gave_up_since_.reset();
    JobOutcome outcome = RunJob(job.value(), server_, [this](const std::vector<RankExit>& exits) {
      return EachTurn(exits);
    });
    HandleEvents();
    // The survivors gave up and every rank ended before kolorun blamed anyone:
    // a rank gone without a marker (exit code 0) left them waiting.
    if (unanswering_.empty() && GaveUp(outcome.exits)) BlameUnanswering(outcome.exits);
    // Failures that the survivors recovered from in place are past.
    outcome.exits.erase(outcome.exits.begin(), outcome.exits.begin() + handled_exits_);
    return Decide(outcome, job.value().rank_hosts);
  }

  // While the job runs: the discovery script again every second, CHECK's
  // answer kept current, rank 0's RESTART, RESUMED and SHRUNK taken. Never
  // blocks. Returns true to end the job: in place, the survivors of a lost
  // rank did not say SHRUNK within kInPlaceGrace.
  bool EachTurn(const std::vector<RankExit>& exits) {
    if (script_) {
      if (Clock::now() - last_discovery_ >= std::chrono::seconds(1)) script_->Start();
      std::optional<Result<std::vector<HostSlots>>> found = script_->Poll();
      if (found.has_value()) {
        last_discovery_ = Clock::now();
        TakeDiscovery(*found);
      }
    }
    // Events first: a GREW changes the hosts that the answer compares with.
    HandleEvents();
    const std::vector<HostSlots> available = pool_.Available(Seconds(Clock::now()));
    update_ = CompareHosts(hosts_, available, run_.settings.max_np);
    const bool limit_reached =
        run_.settings.reset_limit >= 0 && resets_ >= run_.settings.reset_limit;
    std::string reply = CheckReply(update_);
    if (run_.in_place && update_ == HostUpdate::kAdded) {
      // Free slots are filled in place (rank 0 starts new processes there); past
      // --reset-limit the job goes on at its size instead.
      const bool on_this_machine =
          std::all_of(allocated_.begin(), allocated_.end(),
                      [](const HostSlots& h) { return IsLocalHost(h.host); });
      const std::string growth = GrowthInPlace(hosts_, available, run_.settings.max_np, allocated_,
                                               refused_, !on_this_machine);
      // Slots whose new processes did not join are not worth a restart either.
      const bool only_refused =
          growth.empty() &&
          !GrowthInPlace(hosts_, available, run_.settings.max_np, allocated_, {}, !on_this_machine)
               .empty();
      if ((limit_reached && !growth.empty()) || only_refused) reply = CheckReply(HostUpdate::kSame);
      if (!limit_reached && !growth.empty()) reply = "GROW " + growth;
    }
    server_.SetCheckReply(reply, generation_);
    if (!run_.in_place) {
      HandleEvents();
      return false;
    }
    server_.SetShrinkPolicy(
        limit_reached ? "--reset-limit " + std::to_string(run_.settings.reset_limit) + " reached"
                      : std::string(),
        run_.settings.min_np);
    if (exits.size() > static_cast<size_t>(handled_exits_) && !loss_since_) {
      loss_since_ = Clock::now();
    }
    HandleEvents();
    TakeShrink(exits);
    if (GaveUp(exits) && !gave_up_since_) gave_up_since_ = Clock::now();
    if (gave_up_since_ && Clock::now() - *gave_up_since_ >= kGaveUpWindow) {
      BlameUnanswering(exits);
      Say(DescribeUnanswering() + "; ending incarnation " + std::to_string(generation_) +
          " to restart it without them");
      return true;
    }
    if (loss_since_ && Clock::now() - *loss_since_ > kInPlaceGrace) {
      Say("the survivors of " + DescribeLoss(exits) + " did not recover in place within " +
          std::to_string(kInPlaceGrace.count()) + " s; ending incarnation " +
          std::to_string(generation_) + " to restart it");
      return true;
    }
    return false;
  }

  // The survivors said SHRUNK: once kolorun has seen the exits of the ranks
  // they lost, the incarnation goes on in place as the next generation.
  void TakeShrink(const std::vector<RankExit>& exits) {
    if (!shrunk_) return;
    const int lost = running_np_ - shrunk_->request.size;
    const int unhandled = static_cast<int>(exits.size()) - handled_exits_;
    // The survivors may learn of the loss before kolo-rank's marker reaches
    // kolorun: wait for it (a few turns), then go on with what is known.
    if (unhandled < lost && Clock::now() - shrunk_->when < std::chrono::seconds(5)) return;
    const std::string what = DescribeLoss(exits);
    std::map<std::string, int> lost_on;
    for (size_t i = static_cast<size_t>(handled_exits_); i < exits.size(); ++i) {
      ++lost_on[HostOf(exits[i])];
    }
    std::vector<std::string> gone;
    for (HostSlots& h : hosts_) {
      auto it = lost_on.find(h.host);
      if (it == lost_on.end()) continue;
      h.slots -= it->second;
      if (h.slots <= 0) gone.push_back(h.host);
    }
    hosts_.erase(std::remove_if(hosts_.begin(), hosts_.end(),
                                [](const HostSlots& h) { return h.slots <= 0; }),
                 hosts_.end());
    const std::string blacklisted = gone.empty() ? "" : "; " + BlacklistFailed(gone);
    ++resets_;
    ++generation_;  // the server moved to it when it accepted SHRUNK
    const std::string next = " go on in place as incarnation " + std::to_string(generation_);
    if (unhandled == 0) {
      // A collective failed on every rank (a stall, a mismatch) without a loss:
      // Horovod's elastic run resets then too.
      since_ = Since{"a failed collective (no rank lost)", shrunk_->when, true};
      Say("incarnation " + std::to_string(generation_ - 1) +
          " failed a collective without losing a rank; its " +
          std::to_string(shrunk_->request.size) + " ranks" + next);
    } else {
      since_ = Since{what + blacklisted, loss_since_.value_or(shrunk_->when), true};
      Say("incarnation " + std::to_string(generation_ - 1) + " lost " + what + blacklisted +
          "; its " + std::to_string(shrunk_->request.size) + " survivors" + next);
    }
    running_np_ = shrunk_->request.size;
    handled_exits_ = static_cast<int>(exits.size());
    shrunk_.reset();
    loss_since_.reset();
    if (resumed_after_shrink_) {
      SayResumed(*resumed_after_shrink_);
      resumed_after_shrink_.reset();
    }
  }

  // Rank 0's new processes joined the running ranks (GREW): the job goes on in
  // place at the new size as the next generation (the server moved to it).
  void TakeGrowth(const ElasticEvent& e) {
    Result<std::vector<HostSlots>> added = ParseHostSpec(e.request.slots);
    for (const HostSlots& a : added.ok() ? added.value() : std::vector<HostSlots>()) {
      for (std::vector<HostSlots>* hosts : {&hosts_, &allocated_}) {
        auto it = std::find_if(hosts->begin(), hosts->end(),
                               [&](const HostSlots& h) { return h.host == a.host; });
        if (it == hosts->end()) {
          hosts->push_back(a);  // PRRTE added it to the allocation
        } else if (hosts == &hosts_) {
          it->slots += a.slots;
        }
      }
    }
    ++resets_;
    ++generation_;
    Say("incarnation " + std::to_string(generation_ - 1) + " grew in place: new process(es) on " +
        e.request.slots + " joined its " + std::to_string(running_np_) +
        " ranks, which go on in the same processes as incarnation " + std::to_string(generation_) +
        " at np=" + std::to_string(e.request.size));
    since_ = Since{"new process(es) on " + e.request.slots + " joined", e.when, true};
    running_np_ = e.request.size;
  }

  // The survivors' shrink waited for ranks alive that never joined it (stuck
  // in their own code, stopped, or gone without a failure): those are the
  // ranks that have not exited with a marker once the others gave up (their
  // patience ends within moments of each other). They are blamed, and the
  // incarnation restarts without their hosts.
  void BlameUnanswering(const std::vector<RankExit>& exits) {
    std::vector<bool> exited(rank_hosts_.size(), false);
    for (const RankExit& e : exits) {
      if (e.rank >= 0 && e.rank < static_cast<int>(exited.size())) exited[e.rank] = true;
    }
    unanswering_.clear();
    for (size_t r = 0; r < exited.size(); ++r) {
      if (!exited[r]) unanswering_.push_back(static_cast<int>(r));
    }
  }

  // Whether a survivor gave up recovering in place (kGaveUpInPlace).
  bool GaveUp(const std::vector<RankExit>& exits) const {
    return std::any_of(exits.begin() + handled_exits_, exits.end(),
                       [](const RankExit& e) { return e.signal == 0 && e.code == kGaveUpInPlace; });
  }

  // "rank(s) 3 on host h did not join ..." for unanswering_.
  std::string DescribeUnanswering() const {
    std::string ranks;
    for (int r : unanswering_) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) + " on host " + rank_hosts_[r];
    }
    return (unanswering_.size() == 1 ? "rank " : "ranks ") + ranks +
           " did not join the survivors' recovery in place (stuck, stopped, or gone without "
           "failing)";
  }

  // "rank 3 on host h was killed by signal 9 (SIGKILL)" for the first exit not handled yet,
  // "and N more ranks" for the rest.
  std::string DescribeLoss(const std::vector<RankExit>& exits) const {
    if (exits.size() <= static_cast<size_t>(handled_exits_)) return "a rank";
    const RankExit& first = exits[static_cast<size_t>(handled_exits_)];
    const size_t more = exits.size() - static_cast<size_t>(handled_exits_) - 1;
    return DescribeRankExit(first, HostOf(first)) +
           (more == 0 ? "" : " and " + std::to_string(more) + " more rank(s)");
  }

  std::string HostOf(const RankExit& e) const {
    return e.rank >= 0 && e.rank < static_cast<int>(rank_hosts_.size()) ? rank_hosts_[e.rank]
                                                                        : e.host;
  }

  // A discovery result: the new host list, or a warning (once per message)
  // while the hosts listed before are kept (Horovod retries a script that
  // failed after its first run).
  void TakeDiscovery(const Result<std::vector<HostSlots>>& found) {
    if (!found.ok()) {
      if (found.status().message() != last_discovery_error_) {
        Say("warning: " + found.status().message() + "; keeping the hosts it listed before");
      }
      last_discovery_error_ = found.status().message();
      return;
    }
    last_discovery_error_.clear();
    if (pool_.Update(found.value())) {
      const std::string listed = FormatHostSpec(found.value());
      Say("discovery lists " + (listed.empty() ? std::string("no hosts") : listed));
    }
  }

  void HandleEvents() {
    for (const ElasticEvent& e : server_.TakeElasticEvents()) {
      if (e.request.verb == ElasticRequest::Verb::kRestart) {
        restart_ = Restart{e.request.commit, e.when, update_};
        Say("rank 0 asks for a restart at commit " + std::to_string(e.request.commit) + " (" +
            DescribeUpdate(update_) + ")");
      } else if (e.request.verb == ElasticRequest::Verb::kResumed && shrunk_.has_value()) {
        resumed_after_shrink_ = e;  // said once TakeShrink has matched the loss
      } else if (e.request.verb == ElasticRequest::Verb::kResumed && since_.has_value()) {
        SayResumed(e);
      } else if (e.request.verb == ElasticRequest::Verb::kShrunk) {
        shrunk_ = e;
      } else if (e.request.verb == ElasticRequest::Verb::kGrew) {
        TakeGrowth(e);
      } else if (e.request.verb == ElasticRequest::Verb::kNotJoined) {
        Result<std::vector<HostSlots>> hosts = ParseHostSpec(e.request.slots);
        for (const HostSlots& h : hosts.ok() ? hosts.value() : std::vector<HostSlots>()) {
          refused_.push_back(h.host);
        }
        Say("the new process(es) on " + e.request.slots + " did not start or join; incarnation " +
            std::to_string(generation_) +
            " goes on without them, and their slots are not offered again");
      }
    }
  }

  // "resumed at np=2 (a:2) from commit 7, 6.3 s after <what happened> (reset 1 of 3)".
  void SayResumed(const ElasticEvent& e) {
    const std::string from = e.request.commit < 0 ? std::string("no commit (a fresh start)")
                                                  : "commit " + std::to_string(e.request.commit);
    const double seconds = std::chrono::duration<double>(e.when - since_->when).count();
    std::string limit = run_.settings.reset_limit >= 0
                            ? " of " + std::to_string(run_.settings.reset_limit)
                            : std::string();
    Say(std::string(since_->in_place ? "resumed in place" : "resumed") +
        " at np=" + std::to_string(e.request.size) + " (" + FormatHostSpec(hosts_) + ") from " +
        from + ", " + Fixed(seconds) + " s after " + since_->what + " (reset " +
        std::to_string(resets_) + limit + ")");
    since_.reset();
  }

  // What follows the incarnation that ended with `outcome`.
  std::optional<int> Decide(const JobOutcome& outcome, const std::vector<std::string>& rank_hosts) {
    IncarnationEnd end;
    end.stopped = outcome.stop_signal != 0 || !outcome.ended.empty();
    end.mpirun_ok = WIFEXITED(outcome.mpirun_status) && WEXITSTATUS(outcome.mpirun_status) == 0 &&
                    outcome.exits.empty();
    end.restart_requested = restart_.has_value();
    const RankExit* cause = unanswering_.empty() ? Cause(outcome.exits) : nullptr;
    std::string host;
    for (int r : unanswering_) {
      if (std::find(end.failed_hosts.begin(), end.failed_hosts.end(), rank_hosts[r]) ==
          end.failed_hosts.end())
        end.failed_hosts.push_back(rank_hosts[r]);
    }
    if (cause != nullptr) {
      host = cause->rank >= 0 && cause->rank < static_cast<int>(rank_hosts.size())
                 ? rank_hosts[cause->rank]
                 : cause->host;
      end.failed_hosts.push_back(host);
    }
    for (const std::string& h : outcome.silent_hosts) {
      if (std::find(end.failed_hosts.begin(), end.failed_hosts.end(), h) == end.failed_hosts.end())
        end.failed_hosts.push_back(h);
    }
    const std::string what = !unanswering_.empty() ? DescribeUnanswering()
                             : cause != nullptr
                                 ? DescribeRankExit(*cause, host)
                                 : "hosts " + JoinComma(end.failed_hosts) + " stopped answering";
    if (cause != nullptr) failure_code_ = RankExitCode(*cause);
    const std::string ended = "incarnation " + std::to_string(generation_);
    switch (DecideNext(end, hosts_, resets_, run_.settings.reset_limit)) {
      case NextStep::kFinish:
        return Report(outcome);
      case NextStep::kEveryHostFailed:
        return Fail("elastic: every host of " + ended + " failed (" + what + "); not restarting",
                    failure_code_);
      case NextStep::kResetLimitReached:
        return Fail("elastic: --reset-limit " + std::to_string(run_.settings.reset_limit) +
                        " reached: not restarting after " +
                        (end.failed_hosts.empty() ? RestartText() : what),
                    end.failed_hosts.empty() ? 1 : failure_code_);
      case NextStep::kRestart:
        Say(ended + " ended for " + RestartText());
        since_ = Since{RestartText(), restart_->when};
        break;
      case NextStep::kRestartAfterFailure:
        since_ = Since{what + "; " + BlacklistFailed(end.failed_hosts), outcome.failure_time};
        Say(ended + " failed: " + since_->what);
        break;
    }
    ++resets_;
    ++generation_;
    return std::nullopt;
  }

  std::string RestartText() const {
    return restart_.has_value()
               ? "the restart asked at commit " + std::to_string(restart_->commit) + " (" +
                     DescribeUpdate(restart_->update) + ")"
               : "a restart";
  }

  // "host h blacklisted (for the rest of the job | for 23 s)".
  std::string BlacklistFailed(const std::vector<std::string>& hosts) {
    std::string out;
    for (const std::string& h : hosts) {
      const double seconds = pool_.Blacklist(h, Seconds(Clock::now()), random_(rng_));
      out += (out.empty() ? "" : ", ") + std::string("host ") + h + " blacklisted " +
             (seconds < 0 ? std::string("for the rest of the job")
                          : "for " + std::to_string(static_cast<int>(seconds + 0.5)) + " s");
    }
    return out;
  }

  bool Ran(const std::string& host) const {
    return std::any_of(hosts_.begin(), hosts_.end(),
                       [&](const HostSlots& h) { return h.host == host; });
  }

  // Waits up to --elastic-timeout for `needed` usable slots; returns the
  // next incarnation's hosts.
  Result<std::vector<HostSlots>> WaitForSlots(int needed, const char* flag) {
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(run_.settings.timeout_seconds));
    bool said = false;
    for (;;) {
      const std::vector<HostSlots> available = pool_.Available(Seconds(Clock::now()));
      if (TotalSlots(available) >= needed) {
        return ChooseIncarnationHosts(available, run_.settings.max_np);
      }
      const std::string have = std::to_string(TotalSlots(available)) + " available (" +
                               (available.empty() ? "no hosts" : FormatHostSpec(available)) + ")";
      const std::vector<std::string> out = pool_.Blacklisted(Seconds(Clock::now()));
      const std::string blacklisted = out.empty() ? "" : "; blacklisted: " + JoinComma(out);
      if (!said) {
        said = true;
        Say("waiting up to " + Fixed(run_.settings.timeout_seconds) +
            " s (--elastic-timeout) for " + std::to_string(needed) + " slots (" + flag + "); " +
            have + blacklisted);
      }
      if (StopSignal() != 0) {
        failure_code_ = 128 + StopSignal();
        return Status::Aborted(std::string("stopped by ") + strsignal(StopSignal()) +
                               " while waiting for slots");
      }
      if (Clock::now() >= deadline) {
        return Status::Aborted("only " + have + " of the " + std::to_string(needed) +
                               " slots that " + flag + " needs after waiting " +
                               Fixed(run_.settings.timeout_seconds) + " s (--elastic-timeout)" +
                               blacklisted);
      }
      PauseAndDiscover();
    }
  }

  // One second, then the discovery script's next answer (nothing runs meanwhile).
  void PauseAndDiscover() {
    const auto next = last_discovery_ + std::chrono::seconds(1);
    if (next > Clock::now())
      usleep(static_cast<useconds_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(next - Clock::now()).count()));
    last_discovery_ = Clock::now();
    if (script_) TakeDiscovery(script_->RunNow());
  }

  struct Restart {
    long commit;
    Clock::time_point when;
    HostUpdate update;
  };
  // What the next RESUMED line measures from.
  struct Since {
    std::string what;
    Clock::time_point when;
    bool in_place = false;
  };
  // How long the survivors of a lost rank have to say SHRUNK before the
  // incarnation is ended and restarted: a survivor learns of the loss at its
  // next collective, after the step it is computing, and gives up a shrink
  // that a living rank does not join after as long (ModuleState).
  static constexpr std::chrono::seconds kInPlaceGrace{30};

  const ElasticRun& run_;
  const PlanIncarnation& plan_;
  RendezvousServer& server_;
  HostPool pool_;
  std::unique_ptr<DiscoveryScript> script_;
  Clock::time_point last_discovery_;
  std::string last_discovery_error_;
  std::vector<HostSlots> hosts_;  // the incarnation's
  int generation_ = 0;
  int resets_ = 0;
  int failure_code_ = 1;  // the exit code of the last failing rank
  HostUpdate update_ = HostUpdate::kSame;
  std::optional<Restart> restart_;
  std::optional<Since> since_;
  // In place: the incarnation's rank -> host, its ranks now, the exits
  // (RunJob's) already recovered from, a SHRUNK waiting for its exits, and
  // since when a loss waits for the survivors.
  std::vector<std::string> rank_hosts_;
  int running_np_ = 0;
  int handled_exits_ = 0;
  std::optional<ElasticEvent> shrunk_;
  std::optional<ElasticEvent> resumed_after_shrink_;  // came before its SHRUNK was matched
  std::optional<Clock::time_point> loss_since_;
  std::vector<int> unanswering_;  // ranks blamed for not joining the survivors' shrink
  // In place: the hosts that mpirun started the incarnation on (new processes
  // start only there), and those whose new processes did not join.
  std::vector<HostSlots> allocated_;
  std::vector<std::string> refused_;
  std::optional<Clock::time_point> gave_up_since_;  // the first survivor that gave up
  // How long after the first survivor gave up the others have to give up too.
  static constexpr std::chrono::seconds kGaveUpWindow{5};
  std::mt19937 rng_{std::random_device{}()};
  std::uniform_real_distribution<double> random_{0.0, 1.0};
};

}  // namespace

std::map<std::string, std::string> IncarnationVariables(const std::string& job_id, int generation,
                                                        bool in_place) {
  std::map<std::string, std::string> variables = {
      {env::kElastic, "1"},
      {env::kElasticJob, job_id},
      {env::kElasticGeneration, std::to_string(generation)}};
  if (in_place) variables[env::kElasticInPlace] = "1";
  return variables;
}

// The job's commit store on this machine (<KOLO_ELASTIC_DIR or /dev/shm>/kolo-elastic-<job>),
// once the job has ended: a job that ended in failure leaves its ranks' last commits,
// which no later job can load (each has its own id). Other hosts keep theirs.
void RemoveLocalCommits(const std::string& job_id) {
  const char* dir = std::getenv(env::kElasticDir);
  const std::filesystem::path store =
      std::filesystem::path(dir != nullptr && *dir != '\0' ? dir : "/dev/shm") /
      ("kolo-elastic-" + job_id);
  std::error_code ec;
  std::filesystem::remove_all(store, ec);
}

int RunElastic(const ElasticRun& run, const PlanIncarnation& plan, RendezvousServer& server) {
  const int code = ElasticLoop(run, plan, server).Run();
  RemoveLocalCommits(run.job_id);
  return code;
}

}  // namespace kolo::launcher
