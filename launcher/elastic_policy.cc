#include "elastic_policy.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace kolo::launcher {
namespace {

int SlotsOf(const std::vector<HostSlots>& hosts, const std::string& host) {
  for (const HostSlots& h : hosts) {
    if (h.host == host) return h.slots;
  }
  return 0;
}

}  // namespace

Result<ElasticSettings> MakeElasticSettings(int given_np, int min_np, int max_np, int reset_limit,
                                            const std::vector<int>& cooldown_range,
                                            double timeout_seconds) {
  ElasticSettings s;
  if (given_np == 0 && min_np == 0) {
    return Status::InvalidArgument(
        "elastic mode needs -np (the ranks to start with) or --min-np (the fewest to run with)");
  }
  s.np = given_np != 0 ? given_np : min_np;
  s.min_np = min_np != 0 ? min_np : s.np;
  s.max_np = max_np;
  if (s.min_np > s.np) {
    return Status::InvalidArgument("--min-np " + std::to_string(s.min_np) + " is more than -np " +
                                   std::to_string(s.np) + " (the ranks to start with)");
  }
  if (s.max_np != 0 && s.max_np < s.np) {
    return Status::InvalidArgument("--max-np " + std::to_string(s.max_np) + " is less than -np " +
                                   std::to_string(s.np));
  }
  s.reset_limit = reset_limit;
  if (!cooldown_range.empty()) {
    if (cooldown_range.size() != 2) {
      return Status::InvalidArgument(
          "--blacklist-cooldown-range takes two values: MIN MAX seconds");
    }
    CooldownRange c{cooldown_range[0], cooldown_range[1]};
    if (c.min_seconds < kMinCooldownSeconds || c.max_seconds > kMaxCooldownSeconds ||
        c.min_seconds > c.max_seconds) {
      return Status::InvalidArgument("--blacklist-cooldown-range " + std::to_string(c.min_seconds) +
                                     " " + std::to_string(c.max_seconds) +
                                     ": expected MIN <= MAX within " +
                                     std::to_string(kMinCooldownSeconds) + " and " +
                                     std::to_string(kMaxCooldownSeconds) + " seconds");
    }
    s.cooldown = c;
  }
  s.timeout_seconds = timeout_seconds;
  return s;
}

bool HostPool::Update(const std::vector<HostSlots>& discovered) {
  if (discovered == discovered_) return false;
  discovered_ = discovered;
  return true;
}

bool HostPool::Out(const std::string& host, double now) const {
  auto it = states_.find(host);
  if (it == states_.end() || !it->second.blacklisted) return false;
  return it->second.cooldown_end < 0 || now < it->second.cooldown_end;
}

double HostPool::Blacklist(const std::string& host, double now, double random01) {
  HostState& s = states_[host];
  const bool cooling = s.blacklisted && s.cooldown_end >= 0 && now < s.cooldown_end;
  s.blacklisted = true;
  order_.erase(std::remove(order_.begin(), order_.end(), host), order_.end());
  if (!cooldown_) return -1;
  if (cooling) return s.cooldown_end - now;  // Horovod: a cooldown running is not restarted
  ++s.times;
  const double lower = cooldown_->min_seconds;
  const double delay = lower * std::ldexp(1.0, std::min(s.times, 30)) + random01 * lower;
  const double seconds = std::max(lower, std::min<double>(cooldown_->max_seconds, delay));
  s.cooldown_end = now + seconds;
  return seconds;
}

std::vector<HostSlots> HostPool::Available(double now) {
  // Hosts kept in order first, then the newcomers in discovery's order.
  std::vector<std::string> order;
  for (const std::string& h : order_) {
    if (SlotsOf(discovered_, h) > 0 && !Out(h, now)) order.push_back(h);
  }
  for (const HostSlots& h : discovered_) {
    if (!Out(h.host, now) && std::find(order.begin(), order.end(), h.host) == order.end())
      order.push_back(h.host);
  }
  for (const std::string& h : order) {
    if (std::find(order_.begin(), order_.end(), h) == order_.end()) order_.push_back(h);
  }
  std::vector<HostSlots> out;
  for (const std::string& h : order) out.push_back({h, SlotsOf(discovered_, h)});
  return out;
}

std::vector<std::string> HostPool::Blacklisted(double now) const {
  std::vector<std::string> out;
  for (const auto& [host, state] : states_) {
    if (Out(host, now)) out.push_back(host);
  }
  return out;
}

std::vector<HostSlots> ChooseIncarnationHosts(const std::vector<HostSlots>& available, int max_np) {
  std::vector<HostSlots> out;
  int total = 0;
  for (const HostSlots& h : available) {
    if (max_np != 0 && total >= max_np) break;
    const int take = max_np != 0 ? std::min(h.slots, max_np - total) : h.slots;
    out.push_back({h.host, take});
    total += take;
  }
  return out;
}

HostUpdate CompareHosts(const std::vector<HostSlots>& running,
                        const std::vector<HostSlots>& available, int max_np) {
  const bool removed = std::any_of(running.begin(), running.end(), [&](const HostSlots& h) {
    return SlotsOf(available, h.host) < h.slots;
  });
  const int size = TotalSlots(running);
  const bool added = (max_np == 0 || size < max_np) && TotalSlots(available) > size;
  if (added && removed) return HostUpdate::kBoth;
  if (added) return HostUpdate::kAdded;
  if (removed) return HostUpdate::kRemoved;
  return HostUpdate::kSame;
}

namespace {

// CHECK's reply and the words of kolorun's report, per answer.
struct UpdateWords {
  HostUpdate update;
  const char* reply;
  const char* description;
};
constexpr UpdateWords kUpdateWords[] = {
    {HostUpdate::kSame, "SAME", "no change"},
    {HostUpdate::kAdded, "UPDATED added", "hosts added"},
    {HostUpdate::kRemoved, "UPDATED removed", "hosts removed"},
    {HostUpdate::kBoth, "UPDATED both", "hosts added and removed"},
};

const UpdateWords& WordsFor(HostUpdate update) {
  for (const UpdateWords& w : kUpdateWords) {
    if (w.update == update) return w;
  }
  return kUpdateWords[0];
}

}  // namespace

std::string GrowthInPlace(const std::vector<HostSlots>& running,
                          const std::vector<HostSlots>& available, int max_np,
                          const std::vector<HostSlots>& allocated,
                          const std::vector<std::string>& refused, bool can_add_hosts) {
  std::string growth;
  for (const HostSlots& h : ChooseIncarnationHosts(available, max_np)) {
    if (std::find(refused.begin(), refused.end(), h.host) != refused.end()) continue;
    if (!can_add_hosts && SlotsOf(allocated, h.host) == 0) continue;
    const int more = h.slots - SlotsOf(running, h.host);
    if (more <= 0) continue;
    growth += (growth.empty() ? "" : ",") + std::string(SlotsOf(allocated, h.host) > 0 ? "" : "+") +
              h.host + ":" + std::to_string(more);
  }
  return growth;
}

std::string CheckReply(HostUpdate update) { return WordsFor(update).reply; }

std::string DescribeUpdate(HostUpdate update) { return WordsFor(update).description; }

NextStep DecideNext(const IncarnationEnd& end, const std::vector<HostSlots>& running, int resets,
                    int reset_limit) {
  if (end.stopped) return NextStep::kFinish;
  const bool failed = !end.mpirun_ok || !end.failed_hosts.empty();
  if (!failed && !end.restart_requested) return NextStep::kFinish;
  // A failure that names no host cannot be acted on: reported as without elastic mode.
  if (failed && end.failed_hosts.empty()) return NextStep::kFinish;
  if (failed && std::all_of(running.begin(), running.end(), [&](const HostSlots& h) {
        return std::find(end.failed_hosts.begin(), end.failed_hosts.end(), h.host) !=
               end.failed_hosts.end();
      })) {
    return NextStep::kEveryHostFailed;
  }
  if (reset_limit >= 0 && resets >= reset_limit) return NextStep::kResetLimitReached;
  return failed ? NextStep::kRestartAfterFailure : NextStep::kRestart;
}

}  // namespace kolo::launcher
