// kolorun's elastic mode (--min-np, --max-np or --host-discovery-script):
// MPI cannot change a job's size, so a change of membership ends the ranks
// and kolorun starts a new mpirun job, an incarnation, on the hosts there
// now, as torchrun does. The ranks keep their committed state in each
// host's /dev/shm and resume from the newest complete commit.
//
// The loop: discover the hosts (the script again every second while a job
// runs, without blocking the job's output; or the fixed pool of -H,
// --hostfile, the scheduler), leave out the blacklisted ones, wait up to
// --elastic-timeout for enough slots, run one incarnation, and then, from
// how it ended (elastic_policy.h, DecideNext): finish, restart on a RESTART,
// blacklist the failed host and restart, or stop past --reset-limit.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "elastic_policy.h"
#include "hosts.h"
#include "rendezvous.h"
#include "supervise.h"

namespace kolo::launcher {

struct ElasticRun {
  ElasticSettings settings;
  std::string discovery_script;       // "": the fixed pool
  int slots_per_host = 1;             // for the script's lines without ":slots"
  std::vector<HostSlots> fixed_pool;  // without a script
  std::string job_id;                 // KOLO_ELASTIC_JOB, the same for every incarnation
  // Lost ranks recovered in place (Open MPI 5's fault tolerance: the
  // survivors shrink and go on, docs/elastic.md "Reset in place"), else by
  // restarting every worker; `recovery` says which and why, in one line.
  bool in_place = false;
  std::string recovery;
};

// Plans one incarnation on `hosts`; its ranks also get `variables`.
using PlanIncarnation = std::function<Result<Job>(
    const std::vector<HostSlots>& hosts, const std::map<std::string, std::string>& variables)>;

// What every rank of incarnation `generation` gets: KOLO_ELASTIC=1, KOLO_ELASTIC_JOB,
// _GENERATION, and KOLO_ELASTIC_IN_PLACE=1 when `in_place`.
std::map<std::string, std::string> IncarnationVariables(const std::string& job_id, int generation,
                                                        bool in_place = false);

// Runs incarnations until the job is done or cannot go on; returns kolorun's exit code.
int RunElastic(const ElasticRun& run, const PlanIncarnation& plan, RendezvousServer& server);

}  // namespace kolo::launcher
