#include "hosts.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <set>
#include <sstream>

#include "cloud_hosts.h"

namespace kolo::launcher {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

// A positive count, or an error naming what it counts.
Result<int> PositiveInt(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return Status::InvalidArgument(what + " '" + text + "' is not a positive whole number");
  }
  int v = std::stoi(text);
  if (v <= 0) return Status::InvalidArgument(what + " must be at least 1, got " + text);
  if (v > kMaxSlots) {
    return Status::InvalidArgument(what + " " + text + " is more than " +
                                   std::to_string(kMaxSlots));
  }
  return v;
}

bool ValidHostName(const std::string& h) {
  return !h.empty() && std::all_of(h.begin(), h.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':';
  });
}

// One entry per host, its slots added up, in first-seen order. Schedulers
// repeat a host: PBS_NODEFILE once per slot, SGE's PE_HOSTFILE once per
// queue, LSF once per block, Slurm when a node list names a node twice. Left
// as separate entries, one host would count as two nodes: two node ranks, two
// sets of local ranks from 0 (so two ranks on one GPU).
std::vector<HostSlots> MergeRepeats(const std::vector<HostSlots>& hosts) {
  std::vector<HostSlots> out;
  for (const HostSlots& h : hosts) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const HostSlots& o) { return o.host == h.host; });
    if (it == out.end()) {
      out.push_back(h);
    } else {
      it->slots = std::min(it->slots + h.slots, kMaxSlots + 1);  // PlaceRanks refuses more
    }
  }
  return out;
}

std::vector<HostSlots> CountRepeats(const std::vector<std::string>& names) {
  std::vector<HostSlots> each;
  for (const std::string& n : names) each.push_back({n, 1});
  return MergeRepeats(each);
}

Status CheckNoDuplicates(const std::vector<HostSlots>& hosts, const std::string& where) {
  std::set<std::string> seen;
  for (const HostSlots& h : hosts) {
    if (!seen.insert(h.host).second) {
      return Status::InvalidArgument(where + ": host '" + h.host +
                                     "' is listed twice; give each host once with its slots");
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckHostName(const std::string& host, const std::string& where) {
  if (ValidHostName(host)) return Status::OK();
  return Status::InvalidArgument(where + ": '" + host + "' is not a valid host name");
}

Result<std::vector<HostSlots>> ParseHostSpec(const std::string& spec) {
  if (Trim(spec).empty()) return Status::InvalidArgument("-H: the host list is empty");
  std::vector<HostSlots> out;
  for (const std::string& raw : Split(spec, ',')) {
    std::string item = Trim(raw);
    if (item.empty()) {
      return Status::InvalidArgument("-H '" + spec + "': empty entry (a stray comma?)");
    }
    HostSlots h;
    size_t colon = item.rfind(':');
    h.host = item.substr(0, colon);
    if (colon != std::string::npos) {
      Result<int> slots = PositiveInt(item.substr(colon + 1), "-H '" + item + "': slot count");
      if (!slots.ok()) return slots.status();
      h.slots = slots.value();
    }
    KOLO_RETURN_IF_ERROR(CheckHostName(h.host, "-H '" + spec + "'"));
    out.push_back(h);
  }
  KOLO_RETURN_IF_ERROR(CheckNoDuplicates(out, "-H '" + spec + "'"));
  return out;
}

std::string FormatHostSpec(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const HostSlots& h : hosts) {
    out += (out.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  return out;
}

namespace {

// One hostfile line's words: "host slots=N [max_slots=M]", "host:N" (MPICH's
// and Intel MPI's form: one word with one colon; an IPv6 address has more,
// and is a host) or "host".
Result<HostSlots> HostfileLine(const std::vector<std::string>& words, const std::string& line,
                               const std::string& where) {
  HostSlots h{words[0], 1};
  const bool colon_form = std::count(h.host.begin(), h.host.end(), ':') == 1;
  if (colon_form && words.size() > 1) {
    return Status::InvalidArgument(where + ": expected 'host slots=N' or 'host:N', got '" +
                                   Trim(line) + "'");
  }
  if (colon_form) {
    const size_t colon = h.host.find(':');
    Result<int> slots = PositiveInt(h.host.substr(colon + 1), where + ": slots");
    if (!slots.ok()) return slots.status();
    h.slots = slots.value();
    h.host.resize(colon);
  }
  KOLO_RETURN_IF_ERROR(CheckHostName(h.host, where));
  for (size_t w = 1; w < words.size(); ++w) {
    const std::string& word = words[w];
    size_t eq = word.find('=');
    std::string key = word.substr(0, eq);
    if (eq == std::string::npos || (key != "slots" && key != "max_slots")) {
      return Status::InvalidArgument(where + ": expected 'host slots=N' or 'host:N', got '" +
                                     Trim(line) + "'");
    }
    if (key == "slots") {
      Result<int> slots = PositiveInt(word.substr(eq + 1), where + ": slots");
      if (!slots.ok()) return slots.status();
      h.slots = slots.value();
    }
  }
  return h;
}

}  // namespace

Result<std::vector<HostSlots>> ParseHostfile(const std::string& text) {
  std::vector<HostSlots> out;
  std::map<std::string, size_t> line_of;  // host -> the line that listed it
  std::vector<std::string> lines = Split(text, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    std::string line = lines[n];
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    std::vector<std::string> words = Words(line);
    if (words.empty()) continue;
    const std::string where = "hostfile line " + std::to_string(n + 1);
    KOLO_ASSIGN_OR_RETURN(HostSlots h, HostfileLine(words, lines[n], where));
    auto [first, fresh] = line_of.emplace(h.host, n + 1);
    if (!fresh) {
      return Status::InvalidArgument("hostfile: host '" + h.host + "' is listed twice (lines " +
                                     std::to_string(first->second) + " and " +
                                     std::to_string(n + 1) +
                                     "); give each host once with its slots");
    }
    out.push_back(h);
  }
  if (out.empty()) return Status::InvalidArgument("the hostfile lists no hosts");
  return out;
}

namespace {

// Splits a Slurm host list on the commas that are not inside brackets.
Result<std::vector<std::string>> SplitNodelist(const std::string& list) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) {
      return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list + "': unbalanced brackets");
    }
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) {
    return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list + "': unbalanced brackets");
  }
  items.push_back(cur);
  return items;
}

// Appends prefix + N + suffix to `out` for each N of `range` ("01-04" or
// "7"), keeping the width of the range's first number.
Status ExpandRange(const std::string& list, const std::string& prefix, const std::string& range,
                   const std::string& suffix, std::vector<std::string>* out) {
  size_t dash = range.find('-');
  std::string lo = range.substr(0, dash);
  std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() < 10 &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (!digits(lo) || !digits(hi) || std::stol(lo) > std::stol(hi)) {
    return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list + "': bad range '" + range + "'");
  }
  if (std::stol(hi) - std::stol(lo) > 100000) {
    return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list + "': range too large");
  }
  if (out->size() + static_cast<size_t>(std::stol(hi) - std::stol(lo)) > 100000) {
    return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list.substr(0, 80) +
                                   "' expands to more than 100000 hosts");
  }
  for (long v = std::stol(lo); v <= std::stol(hi); ++v) {
    std::string num = std::to_string(v);
    if (num.size() < lo.size()) num = std::string(lo.size() - num.size(), '0') + num;
    out->push_back(prefix + num + suffix);
    KOLO_RETURN_IF_ERROR(CheckHostName(out->back(), "SLURM_JOB_NODELIST"));
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<HostSlots>> ParseDiscoveryOutput(const std::string& text, int default_slots) {
  std::vector<HostSlots> out;
  const std::vector<std::string> lines = Split(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = Trim(lines[i]);
    if (line.empty()) continue;
    const std::string quoted = "line " + std::to_string(i + 1) + " '" + line.substr(0, 80) + "'";
    HostSlots h{line, default_slots};
    const size_t colon = line.find(':');
    bool good = true;
    if (colon != std::string::npos) {
      h.host = line.substr(0, colon);
      Result<int> slots = PositiveInt(line.substr(colon + 1), "slots");
      good = slots.ok();
      if (good) h.slots = slots.value();
    }
    if (!good || !ValidHostName(h.host) || h.host.find(':') != std::string::npos) {
      return Status::InvalidArgument(quoted +
                                     " is not 'host' or 'host:slots' (slots a whole number >= 1)");
    }
    auto before =
        std::find_if(out.begin(), out.end(), [&](const HostSlots& o) { return o.host == h.host; });
    if (before == out.end()) {
      out.push_back(h);
    } else if (before->slots != h.slots) {
      return Status::InvalidArgument(
          quoted + " gives host " + h.host + " " + std::to_string(h.slots) +
          " slots after an earlier line gave " + std::to_string(before->slots));
    }
  }
  return out;
}

Result<std::vector<std::string>> ExpandSlurmNodelist(const std::string& list) {
  Result<std::vector<std::string>> items = SplitNodelist(list);
  if (!items.ok()) return items.status();
  std::vector<std::string> out;
  for (const std::string& raw : items.value()) {
    std::string item = Trim(raw);
    if (item.empty()) {
      return Status::InvalidArgument("SLURM_JOB_NODELIST '" + list + "': empty entry");
    }
    size_t open = item.find('[');
    if (open == std::string::npos) {
      KOLO_RETURN_IF_ERROR(CheckHostName(item, "SLURM_JOB_NODELIST"));
      out.push_back(item);
      continue;
    }
    size_t close = item.find(']', open);
    std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    for (const std::string& range : Split(item.substr(open + 1, close - open - 1), ',')) {
      KOLO_RETURN_IF_ERROR(ExpandRange(list, prefix, range, suffix, &out));
    }
  }
  return out;
}

Result<std::vector<int>> ParseSlurmTasksPerNode(const std::string& text) {
  std::vector<int> out;
  for (const std::string& raw : Split(text, ',')) {
    std::string item = Trim(raw);
    size_t paren = item.find("(x");
    int repeat = 1;
    std::string count = item;
    if (paren != std::string::npos) {
      if (item.back() != ')') {
        return Status::InvalidArgument("SLURM_TASKS_PER_NODE '" + text + "': bad entry '" + item +
                                       "'");
      }
      Result<int> r = PositiveInt(item.substr(paren + 2, item.size() - paren - 3),
                                  "SLURM_TASKS_PER_NODE repeat");
      if (!r.ok()) return r.status();
      repeat = r.value();
      count = item.substr(0, paren);
    }
    Result<int> c = PositiveInt(count, "SLURM_TASKS_PER_NODE count");
    if (!c.ok()) return c.status();
    out.insert(out.end(), repeat, c.value());
  }
  return out;
}

Result<std::vector<HostSlots>> ParsePbsNodefile(const std::string& text) {
  std::vector<std::string> names;
  for (const std::string& line : Split(text, '\n')) {
    std::string host = Trim(line);
    if (host.empty()) continue;
    KOLO_RETURN_IF_ERROR(CheckHostName(host, "PBS_NODEFILE"));
    names.push_back(host);
  }
  if (names.empty()) return Status::InvalidArgument("PBS_NODEFILE lists no hosts");
  return CountRepeats(names);
}

Result<std::vector<HostSlots>> ParseSgeHostfile(const std::string& text) {
  std::vector<HostSlots> out;
  std::vector<std::string> lines = Split(text, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    std::vector<std::string> words = Words(lines[n]);
    if (words.empty()) continue;
    const std::string where = "PE_HOSTFILE line " + std::to_string(n + 1);
    if (words.size() < 2) {
      return Status::InvalidArgument(where + ": expected 'host nslots queue range'");
    }
    KOLO_RETURN_IF_ERROR(CheckHostName(words[0], where));
    Result<int> slots = PositiveInt(words[1], where + ": nslots");
    if (!slots.ok()) return slots.status();
    out.push_back({words[0], slots.value()});
  }
  if (out.empty()) return Status::InvalidArgument("PE_HOSTFILE lists no hosts");
  return MergeRepeats(out);
}

Result<std::vector<HostSlots>> ParseLsfMcpuHosts(const std::string& text) {
  std::vector<std::string> words = Words(text);
  if (words.empty() || words.size() % 2 != 0) {
    return Status::InvalidArgument("LSB_MCPU_HOSTS '" + text +
                                   "': expected pairs 'host slots host slots ...'");
  }
  std::vector<HostSlots> out;
  for (size_t i = 0; i < words.size(); i += 2) {
    KOLO_RETURN_IF_ERROR(CheckHostName(words[i], "LSB_MCPU_HOSTS"));
    Result<int> slots = PositiveInt(words[i + 1], "LSB_MCPU_HOSTS slots of " + words[i]);
    if (!slots.ok()) return slots.status();
    out.push_back({words[i], slots.value()});
  }
  return MergeRepeats(out);
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  int64_t total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  return static_cast<int>(std::min<int64_t>(total, kMaxSlots + 1));
}

std::vector<int> MapBySlot(const std::vector<HostSlots>& hosts, int np) {
  std::vector<int> out;
  for (size_t h = 0; h < hosts.size() && static_cast<int>(out.size()) < np; ++h) {
    for (int s = 0; s < hosts[h].slots && static_cast<int>(out.size()) < np; ++s) {
      out.push_back(static_cast<int>(h));
    }
  }
  return out;
}

namespace {

using HostParser = Result<std::vector<HostSlots>> (*)(const std::string&);

// Reads `path` and parses it; every error names the file.
Result<std::vector<HostSlots>> ParseFile(FileReader read_file, const std::string& path,
                                         HostParser parse) {
  Result<std::string> text = read_file(path);
  if (!text.ok()) return text.status();
  Result<std::vector<HostSlots>> hosts = parse(text.value());
  if (!hosts.ok()) return Status::InvalidArgument(path + ": " + hosts.status().message());
  return hosts;
}

// Slurm's host list with its task counts (1 per host when none are given).
Result<std::vector<HostSlots>> SlurmHosts(const std::string& list, const std::string& tasks) {
  Result<std::vector<std::string>> names = ExpandSlurmNodelist(list);
  if (!names.ok()) return names.status();
  std::vector<int> counts(names.value().size(), 1);
  if (!tasks.empty()) {
    Result<std::vector<int>> t = ParseSlurmTasksPerNode(tasks);
    if (!t.ok()) return t.status();
    if (t.value().size() != counts.size()) {
      return Status::InvalidArgument(
          "SLURM_TASKS_PER_NODE gives " + std::to_string(t.value().size()) +
          " counts but SLURM_JOB_NODELIST has " + std::to_string(counts.size()) + " hosts");
    }
    counts = t.value();
  }
  std::vector<HostSlots> hosts;
  for (size_t i = 0; i < counts.size(); ++i) hosts.push_back({names.value()[i], counts[i]});
  return MergeRepeats(hosts);
}

}  // namespace

Result<Allocation> ResolveHosts(const std::string& host_spec, const std::string& hostfile,
                                const std::map<std::string, std::string>& env, int np,
                                int local_cores, FileReader read_file) {
  auto get = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  if (!host_spec.empty() && !hostfile.empty()) {
    return Status::InvalidArgument("-H and --hostfile cannot be used together; pick one");
  }
  const std::string slurm =
      get("SLURM_JOB_NODELIST").empty() ? get("SLURM_NODELIST") : get("SLURM_JOB_NODELIST");
  Allocation a;
  Result<std::vector<HostSlots>> hosts = [&]() -> Result<std::vector<HostSlots>> {
    if (!host_spec.empty()) {
      a.source = "-H";
      return ParseHostSpec(host_spec);
    }
    if (!hostfile.empty()) {
      a.source = "--hostfile " + hostfile;
      return ParseFile(read_file, hostfile, ParseHostfile);
    }
    if (!slurm.empty()) {
      a.source = "Slurm";
      return SlurmHosts(slurm, get("SLURM_TASKS_PER_NODE"));
    }
    if (!get("PBS_NODEFILE").empty()) {
      a.source = "PBS";
      return ParseFile(read_file, get("PBS_NODEFILE"), ParsePbsNodefile);
    }
    if (!get("PE_HOSTFILE").empty()) {
      a.source = "SGE";
      return ParseFile(read_file, get("PE_HOSTFILE"), ParseSgeHostfile);
    }
    if (!get("LSB_MCPU_HOSTS").empty()) {
      a.source = "LSF";
      return ParseLsfMcpuHosts(get("LSB_MCPU_HOSTS"));
    }
    // The clouds' allocations come whole (they say more than the hosts).
    if (std::optional<MpiOperatorHostfile> pod = FindMpiOperatorHostfile(env)) {
      KOLO_ASSIGN_OR_RETURN(a, MpiOperatorAllocation(*pod, read_file));
      return a.hosts;
    }
    KOLO_RETURN_IF_ERROR(RefuseMpiOperatorWorker(env));
    if (InSageMaker(env)) {
      KOLO_ASSIGN_OR_RETURN(
          a, SageMakerAllocation(env, read_file, np > 0 ? np : std::max(local_cores, 1)));
      return a.hosts;
    }
    a.source = "localhost";
    return std::vector<HostSlots>{{"localhost", np > 0 ? np : std::max(local_cores, 1)}};
  }();
  if (!hosts.ok()) return hosts.status();
  a.hosts = std::move(hosts).value();
  return a;
}

namespace {

// The refusal of a job that leaves hosts of a cloud's allocation without a
// rank: the first `used` hosts get the `np` ranks.
Status IdleHostsError(const Allocation& allocation, int np, size_t used) {
  std::string idle;
  for (size_t h = used; h < allocation.hosts.size(); ++h) {
    if (h - used == 8) {
      idle += " and " + std::to_string(allocation.hosts.size() - h) + " more";
      break;
    }
    idle += (idle.empty() ? "" : ", ") + allocation.hosts[h].host;
  }
  const int total = TotalSlots(allocation.hosts);
  const int every_host = total - allocation.hosts.back().slots + 1;
  return Status::InvalidArgument(
      "-np " + std::to_string(np) + " leaves " +
      (allocation.hosts.size() - used > 1 ? "hosts " : "host ") + idle + " of " +
      allocation.source + " without a rank (ranks fill the " + std::to_string(total) +
      " slots host by host); omit -np to use every slot, give -np " + std::to_string(every_host) +
      " or more, or start the job on fewer hosts");
}

}  // namespace

Result<std::vector<HostSlots>> PlaceRanks(const Allocation& allocation, int np) {
  const int slots = TotalSlots(allocation.hosts);
  if (slots > kMaxSlots) {
    return Status::InvalidArgument(allocation.source + " provides more than " +
                                   std::to_string(kMaxSlots) + " slots; check the slot counts");
  }
  if (np == 0) np = slots;
  if (np > slots) {
    return Status::InvalidArgument("-np " + std::to_string(np) + " asks for more ranks than the " +
                                   std::to_string(slots) + " slots that " + allocation.source +
                                   " provides; lower -np or add slots");
  }
  std::vector<HostSlots> used;
  for (int h : MapBySlot(allocation.hosts, np)) {
    if (used.empty() || used.back().host != allocation.hosts[h].host) {
      used.push_back({allocation.hosts[h].host, 0});
    }
    ++used.back().slots;
  }
  if (allocation.started_for_job && used.size() < allocation.hosts.size()) {
    return IdleHostsError(allocation, np, used.size());
  }
  return used;
}

namespace {

bool IsLoopbackName(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

std::string FirstHostAddress(const std::vector<HostSlots>& hosts, const std::string& this_host) {
  if (hosts.empty()) return "127.0.0.1";
  const std::string& first = hosts.front().host;
  if (!IsLoopbackName(first)) return first;
  for (const HostSlots& h : hosts) {
    if (!IsLoopbackName(h.host) && h.host != this_host) return this_host;
  }
  return first == "localhost" ? "127.0.0.1" : first;
}

std::string JoinHostPort(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace kolo::launcher
