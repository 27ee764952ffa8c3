// Checks done before anything starts: every host resolves, every remote
// host's ssh port answers (probed in parallel, with a timeout), and the
// program can be started on every host.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hosts.h"
#include "program_check.h"

namespace kolo::launcher {

// True if `host` names this machine (localhost, a loopback address, this
// host's name, or an address of one of its interfaces).
bool IsLocalHost(const std::string& host);

// Probes every remote host's ssh port at once, each try bounded by
// `timeout_seconds`. With `wait_seconds` > 0, a host that does not answer yet
// (its name does not resolve, nothing listens, no answer) is tried again
// every second until that many seconds have passed: a cloud's workers start
// their sshd while kolorun runs (an MPIJob's worker pods get their DNS names
// only once running). `waiting` hears one line for each host that kolorun
// waits for. Returns OK, or one line per host that never answered.
Status CheckHosts(const std::vector<HostSlots>& hosts, int ssh_port, double timeout_seconds,
                  double wait_seconds = 0,
                  const std::function<void(const std::string&)>& waiting = {});

// The names of this machine's interfaces that traffic to the hosts that are
// not this machine leaves by (the routing table's answer), and the local
// address on the first of them (where kolorun's rendezvous listens).
struct JobNetwork {
  std::vector<std::string> interfaces;
  // The IPv4 networks of those interfaces ("10.0.0.0/24"): what the job is
  // bound to when kolorun finds the interfaces itself, since the interface
  // names of other hosts need not match this machine's (Open MPI's
  // *_if_include and kolo's bind shim take either).
  std::vector<std::string> subnets;
  std::string address;
};
Result<JobNetwork> NetworkReaching(const std::vector<HostSlots>& hosts);

// The first IPv4 address of interface `name`, or an error naming it.
Result<std::string> InterfaceAddress(const std::string& name);

// How kolorun reaches a remote host's shell: the remote agent's words
// (empty: ssh), and ssh's port and identity file.
struct RemoteShell {
  std::vector<std::string> agent;
  int ssh_port = 0;
  std::string identity_file;
};

// Checks `check`'s programs on every host at once (this machine in-process,
// the others through the remote shell, in parallel, for at most
// `timeout_seconds`); returns one line per problem, every host's.
std::vector<std::string> CheckPrograms(const std::vector<HostSlots>& hosts,
                                       const ProgramCheck& check, const RemoteShell& shell,
                                       double timeout_seconds);

}  // namespace kolo::launcher
