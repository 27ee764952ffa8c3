#include "command.h"

#include <algorithm>

namespace kolo::launcher {

std::vector<std::string> BuildMpirunCommand(const LaunchPlan& plan) {
  std::vector<std::string> argv = {plan.mpirun};
  if (plan.as_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--tag-output", "-np", std::to_string(plan.np)});
  argv.insert(argv.end(),
              {"-H", FormatHostSpec(plan.hosts), "--bind-to", plan.binding, "--map-by", "slot"});
  if (plan.oversubscribe) {
    // Busy-polling ranks sharing cores must yield to each other.
    argv.insert(argv.end(), {"--oversubscribe", "--mca", "mpi_yield_when_idle", "1"});
  }
  argv.insert(argv.end(), {"--mca", "pml", "ob1", "--mca", "btl", "^openib"});
  if (!plan.network_interfaces.empty()) {
    std::string nics;
    for (const std::string& n : plan.network_interfaces) nics += (nics.empty() ? "" : ",") + n;
    argv.insert(argv.end(),
                {"--mca", "btl_tcp_if_include", nics, "--mca", "oob_tcp_if_include", nics});
  }
  std::string rsh_args;
  if (plan.ssh_port > 0) rsh_args += "-p " + std::to_string(plan.ssh_port);
  if (!plan.ssh_identity_file.empty()) {
    rsh_args += (rsh_args.empty() ? "" : " ") + std::string("-i ") + plan.ssh_identity_file;
  }
  if (!rsh_args.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rsh_args});
  if (plan.hosts.size() >= 64) argv.insert(argv.end(), {"--mca", "plm_rsh_no_tree_spawn", "true"});
  for (const auto& [name, value] : plan.env) argv.insert(argv.end(), {"-x", name});
  argv.insert(argv.end(), plan.extra_mpi_args.begin(), plan.extra_mpi_args.end());
  if (!plan.rank_exec.empty()) argv.push_back(plan.rank_exec);
  argv.insert(argv.end(), plan.command.begin(), plan.command.end());
  return argv;
}

std::vector<std::string> ForwardedNames(const std::map<std::string, std::string>& environment,
                                        const std::vector<std::string>& user_names) {
  std::vector<std::string> out;
  for (const auto& [name, value] : environment) {
    bool wanted = name.rfind("KOLO_", 0) == 0 || name.rfind("NCCL_", 0) == 0 || name == "PATH" ||
                  name == "LD_LIBRARY_PATH" || name == "PYTHONPATH" || name == "PYTHONUNBUFFERED";
    if (wanted) out.push_back(name);
  }
  for (const std::string& n : user_names) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

Result<std::vector<std::string>> SplitArgs(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote != 0)
    return Status::InvalidArgument("--mpi-args: unterminated quote in '" + text + "'");
  if (in_word) out.push_back(cur);
  return out;
}

std::string ShellQuote(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](unsigned char c) {
      return std::isalnum(c) ||
             std::string("-_./:=,^@%+").find(static_cast<char>(c)) != std::string::npos;
    });
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

Result<std::string> PinnedGpu(const std::string& visible, int local_rank) {
  if (visible.empty()) return std::to_string(local_rank);
  std::vector<std::string> devices;
  size_t start = 0;
  while (start <= visible.size()) {
    size_t comma = visible.find(',', start);
    if (comma == std::string::npos) comma = visible.size();
    devices.push_back(visible.substr(start, comma - start));
    start = comma + 1;
  }
  if (local_rank >= static_cast<int>(devices.size())) {
    return Status::InvalidArgument("--pin-gpus: local rank " + std::to_string(local_rank) +
                                   " has no GPU of its own: " + "CUDA_VISIBLE_DEVICES=" + visible +
                                   " lists " + std::to_string(devices.size()) +
                                   "; start at most that many ranks per host");
  }
  return devices[local_rank];
}

}  // namespace kolo::launcher
