// Where the ranks go: host lists from -H, hostfiles and scheduler allocations.
// Pure functions of their text input, tested without processes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

// The most slots kolorun accepts per host and in total (a guard against typos
// such as "node1:99999999", which would otherwise allocate per-slot tables).
constexpr int kMaxSlots = 1 << 20;

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots& o) const { return host == o.host && slots == o.slots; }
};

// An error naming `where` unless `host` is a valid host name (letters,
// digits, '-', '.', '_', ':').
Status CheckHostName(const std::string& host, const std::string& where);

// "a:2,b:2" or "a,b" (1 slot each). Duplicate hosts are an error.
Result<std::vector<HostSlots>> ParseHostSpec(const std::string& spec);

// The inverse: "a:2,b:2".
std::string FormatHostSpec(const std::vector<HostSlots>& hosts);

// Lines "host slots=N" (Open MPI, DeepSpeed, Horovod) or "host:N" (MPICH,
// Intel MPI; the MPI Operator writes either), in any mix, since each line says
// which form it is in; "host" alone = 1 slot (an IPv6 address too: the colon
// form is one word with one colon), '#' comments, blank lines. Malformed lines
// are errors that name the line number, a host listed twice names both.
Result<std::vector<HostSlots>> ParseHostfile(const std::string& text);

// A host discovery script's output (Horovod's format, elastic mode): one
// host per line, "host" (with `default_slots` slots) or "host:slots"; blank
// lines are skipped, a line repeated is one host, no line is no host (now).
// A line that is neither, or a host given twice with different slots, is an
// error naming the line.
Result<std::vector<HostSlots>> ParseDiscoveryOutput(const std::string& text, int default_slots);

// Slurm's compressed host list: "gpu[01-04,07],login1" -> gpu01..gpu04, gpu07, login1.
Result<std::vector<std::string>> ExpandSlurmNodelist(const std::string& list);
// Slurm's tasks per node: "2(x3),1" -> {2, 2, 2, 1}.
Result<std::vector<int>> ParseSlurmTasksPerNode(const std::string& text);

// PBS_NODEFILE: one host per line; a host repeated N times has N slots.
Result<std::vector<HostSlots>> ParsePbsNodefile(const std::string& text);
// SGE PE_HOSTFILE: "host nslots queue processor-range" lines.
Result<std::vector<HostSlots>> ParseSgeHostfile(const std::string& text);
// LSF LSB_MCPU_HOSTS: "hostA 2 hostB 1".
Result<std::vector<HostSlots>> ParseLsfMcpuHosts(const std::string& text);

struct Allocation {
  // "-H", "--hostfile FILE", "Slurm", "PBS", "SGE", "LSF", "MPI Operator (FILE)",
  // "SageMaker", "localhost"
  std::string source;
  std::vector<HostSlots> hosts;
  // A cloud started these machines for this job (MPI Operator, SageMaker):
  // each must get a rank, since an idle one is paid for and the job would
  // look complete on fewer machines (PlaceRanks refuses).
  bool started_for_job = false;
  // The allocation's own discovery script (the MPI Operator's
  // discover_hosts.sh), for an elastic job that names none; or "".
  std::string discovery_script;
};

// Picks the hosts in kolorun's order: -H / --hostfile, then a scheduler
// allocation found in `env` (Slurm, PBS, SGE, LSF), then a cloud's
// (cloud_hosts.h: an MPI Operator launcher pod, SageMaker), then localhost
// with `np` slots (or `local_cores` when np is 0). `read_file` reads a file
// or fails with a message.
using FileReader = Result<std::string> (*)(const std::string& path);
Result<Allocation> ResolveHosts(const std::string& host_spec, const std::string& hostfile,
                                const std::map<std::string, std::string>& env, int np,
                                int local_cores, FileReader read_file);

// The hosts that get ranks when `np` ranks (every slot when 0) fill
// `allocation` slot by slot, each with the ranks it gets. An error when the
// allocation has more than kMaxSlots slots in all, or fewer than `np`, or
// when a host started for the job would get no rank.
Result<std::vector<HostSlots>> PlaceRanks(const Allocation& allocation, int np);

// The sum of the slots, capped at kMaxSlots + 1.
int TotalSlots(const std::vector<HostSlots>& hosts);

// Host of each rank when `np` ranks fill the hosts slot by slot (mpirun
// -map-by slot): rank -> host index.
std::vector<int> MapBySlot(const std::vector<HostSlots>& hosts, int np);

// The address at which every rank reaches the first host (rank 0's), given
// this machine's name: "localhost" is 127.0.0.1 while every host is a
// loopback one; a loopback first host with other hosts beside it is this
// machine's name (127.0.0.1 on node2 would be node2 itself). Any other name
// or address is kept.
std::string FirstHostAddress(const std::vector<HostSlots>& hosts, const std::string& this_host);

// "host:port", with an IPv6 address in brackets ("[fe80::1]:port").
std::string JoinHostPort(const std::string& host, int port);

}  // namespace kolo::launcher
