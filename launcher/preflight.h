// Checks done before anything starts: every host resolves, and every remote
// host's ssh port answers (probed in parallel, with a timeout).
#pragma once

#include <string>
#include <vector>

#include "hosts.h"

namespace kolo::launcher {

// True if `host` names this machine (localhost, a loopback address, this
// host's name, or an address of one of its interfaces).
bool IsLocalHost(const std::string& host);

// The first problem found, as a one-line message, or OK.
Status CheckHosts(const std::vector<HostSlots>& hosts, int ssh_port, double timeout_seconds);

}  // namespace kolo::launcher
