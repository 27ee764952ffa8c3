#include "metrics_snapshot.h"

#include <cstdio>
#include <sstream>
#include <vector>

namespace kolo {
namespace {

constexpr size_t kMaxText = 96;  // of a stalled tensor's name or call site

std::string PercentEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, kMaxText)) {
    if (c <= ' ' || c >= 0x7f || c == ',' || c == '%') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Result<std::string> PercentDecode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) {
      return Status::InvalidArgument("truncated percent escape");
    }
    const std::string hex = text.substr(i + 1, 2);
    if (hex.find_first_not_of("0123456789ABCDEFabcdef") != std::string::npos) {
      return Status::InvalidArgument("bad percent escape '%" + hex + "'");
    }
    out += static_cast<char>(std::stoi(hex, nullptr, 16));
    i += 2;
  }
  return out;
}

Result<int64_t> Whole(const std::string& text, const char* what) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(std::string(what) + " '" + text.substr(0, 20) +
                                   "' is not a whole number");
  }
  return static_cast<int64_t>(std::stoll(text));
}

std::vector<std::string> Split(const std::string& text, char by) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == by) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

std::string StallField(const StalledTensor& t) {
  std::string ranks;
  for (size_t i = 0; i < t.missing.size() && i < 16; ++i) {
    ranks += (i ? "-" : "") + std::to_string(t.missing[i]);
  }
  return " s=" + std::to_string(t.process_set) + "," +
         std::to_string(static_cast<int64_t>(t.seconds * 1000)) + "," +
         std::to_string(t.missing.size()) + "," + ranks + "," + PercentEncode(t.name) + "," +
         PercentEncode(t.call_site);
}

Status ParseCollective(const std::string& value, MetricsSample* s) {
  std::vector<std::string> f = Split(value, ',');
  if (f.size() != 4) return Status::InvalidArgument("c= expects op,set,count,bytes");
  int64_t v[4];
  for (int i = 0; i < 4; ++i) {
    KOLO_ASSIGN_OR_RETURN(v[i], Whole(f[i], "a collective count"));
  }
  if (v[0] >= kCountedOps || v[1] >= kSetSlots) {
    return Status::InvalidArgument("c= names an unknown operation or set slot");
  }
  s->ops[v[0]][v[1]] = {v[2], v[3]};
  return Status::OK();
}

Status ParseStall(const std::string& value, MetricsSample* s) {
  std::vector<std::string> f = Split(value, ',');
  if (f.size() != 6) return Status::InvalidArgument("s= expects set,ms,missing,ranks,name,site");
  StalledTensor t;
  KOLO_ASSIGN_OR_RETURN(int64_t set, Whole(f[0], "a stall's set"));
  KOLO_ASSIGN_OR_RETURN(int64_t ms, Whole(f[1], "a stall's age"));
  KOLO_ASSIGN_OR_RETURN(int64_t count, Whole(f[2], "a stall's missing count"));
  t.process_set = static_cast<int>(set);
  t.seconds = static_cast<double>(ms) / 1000.0;
  if (!f[3].empty()) {
    for (const std::string& r : Split(f[3], '-')) {
      KOLO_ASSIGN_OR_RETURN(int64_t rank, Whole(r, "a missing rank"));
      t.missing.push_back(static_cast<int>(rank));
    }
  }
  (void)count;  // more than the 16 listed: the list ends early
  KOLO_ASSIGN_OR_RETURN(t.name, PercentDecode(f[4]));
  KOLO_ASSIGN_OR_RETURN(t.call_site, PercentDecode(f[5]));
  s->stalled.push_back(std::move(t));
  return Status::OK();
}

}  // namespace

const char* CountedOpName(int op) {
  return op >= 0 && op < kCountedOps ? OpTypeName(static_cast<OpType>(op)) : "?";
}

std::string EncodeSnapshot(const std::string& token, const RankSnapshot& s) {
  const MetricsSample& m = s.sample;
  std::string line = "KOLOM " + token + " " + std::to_string(s.rank) + " " +
                     PercentEncode(s.host.empty() ? "?" : s.host) +
                     " n=" + std::to_string(m.steps) + " g=" + std::to_string(m.negotiate_us) +
                     " m=" + std::to_string(m.move_us) + " w=" + std::to_string(m.wait_us);
  for (int o = 0; o < kCountedOps; ++o) {
    for (int k = 0; k < kSetSlots; ++k) {
      const MetricsSample::OpCount& c = m.ops[o][k];
      if (c.count == 0) continue;
      line += " c=" + std::to_string(o) + "," + std::to_string(k) + "," + std::to_string(c.count) +
              "," + std::to_string(c.bytes);
    }
  }
  bool truncated = false;
  for (size_t i = 0; i < m.last_arrivals.size() && i < kMaxLastArrivals; ++i) {
    const std::string field = " l=" + std::to_string(m.last_arrivals[i].first) + "," +
                              std::to_string(m.last_arrivals[i].second);
    if (line.size() + field.size() + 4 >= kMaxSnapshotBytes) {
      truncated = true;
      break;
    }
    line += field;
  }
  for (const StalledTensor& t : m.stalled) {
    std::string field = StallField(t);
    if (line.size() + field.size() + 4 >= kMaxSnapshotBytes) {
      truncated = true;
      continue;
    }
    line += field;
  }
  if (truncated) line += " t=1";
  return line + "\n";
}

Result<RankSnapshot> ParseSnapshot(const std::string& line, const std::string& token) {
  std::istringstream is(line);
  std::vector<std::string> w;
  for (std::string word; is >> word && w.size() < 128;) w.push_back(word);
  if (w.size() < 4 || w[0] != "KOLOM") {
    return Status::InvalidArgument("malformed snapshot (expected KOLOM <token> <rank> <host> ...)");
  }
  if (w[1] != token) return Status::PreconditionFailed("wrong job token");
  RankSnapshot s;
  KOLO_ASSIGN_OR_RETURN(int64_t rank, Whole(w[2], "rank"));
  s.rank = static_cast<int>(rank);
  KOLO_ASSIGN_OR_RETURN(s.host, PercentDecode(w[3]));
  for (size_t i = 4; i < w.size(); ++i) {
    const size_t eq = w[i].find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("snapshot field '" + w[i].substr(0, 20) + "' has no '='");
    }
    const std::string key = w[i].substr(0, eq), value = w[i].substr(eq + 1);
    if (key == "c") {
      KOLO_RETURN_IF_ERROR(ParseCollective(value, &s.sample));
    } else if (key == "s") {
      KOLO_RETURN_IF_ERROR(ParseStall(value, &s.sample));
    } else if (key == "l") {
      std::vector<std::string> f = Split(value, ',');
      if (f.size() != 2) return Status::InvalidArgument("l= expects rank,count");
      KOLO_ASSIGN_OR_RETURN(int64_t rank, Whole(f[0], "a last arrival's rank"));
      KOLO_ASSIGN_OR_RETURN(int64_t count, Whole(f[1], "a last arrival count"));
      s.sample.last_arrivals.emplace_back(static_cast<int>(rank), count);
    } else if (key == "t") {
      s.truncated = true;
    } else if (key == "n" || key == "g" || key == "m" || key == "w") {
      KOLO_ASSIGN_OR_RETURN(int64_t v, Whole(value, key.c_str()));
      (key == "n"   ? s.sample.steps
       : key == "g" ? s.sample.negotiate_us
       : key == "m" ? s.sample.move_us
                    : s.sample.wait_us) = v;
    }
    // Unknown keys are skipped: a newer rank may send more.
  }
  return s;
}

}  // namespace kolo
