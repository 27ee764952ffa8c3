// MakeHostMover: the one place that picks a process set's host mover.
#include <memory>
#include <string>

#include "ops/host_mover.h"
#include "ops/shm_allreduce.h"

namespace kolo {

Result<HostMoverChoice> MakeHostMover(MPI_Comm comm, const MpiOps* ops,
                                      const HostMoverOptions& options) {
  HostMoverChoice choice;
  choice.why = "allreduce through MPI";
  if (options.shared_memory && options.piece_bytes > 0) {
    ShmAllreduce::Options shm_options;
    shm_options.piece_bytes = options.piece_bytes;
    shm_options.timeout_seconds = options.shm_timeout_seconds;
    shm_options.single_copy = options.shm_single_copy;
    auto shm = ShmAllreduce::Create(comm, shm_options);
    if (shm.ok()) {
      const ShmAllreduce& s = *shm.value();
      choice.why = "allreduce through shared memory (every member on this host)";
      if (s.single_copy()) {
        choice.why += ", with one copy from " +
                      std::to_string(shm_options.single_copy_min_bytes >> 10) +
                      " KiB where it measures faster than the pipelined slots (process_vm_readv)";
      } else if (!s.single_copy_why_not().empty()) {
        // Asked for (the default) and refused by the kernel: said once, on rank 0.
        choice.why += ", copying through slots: " + s.single_copy_why_not();
        choice.fallback = true;
      }
      choice.mover = MakeShmMover(comm, ops, std::move(shm).value());
      return choice;
    }
    choice.why += ": " + shm.status().message();
  }
  if (options.hierarchical) {
    std::string why_not;
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> hierarchy, Hierarchy::Create(comm, &why_not));
    if (hierarchy) {
      choice.why = "hierarchical allreduce";
      choice.mover = MakeHierarchicalMover(comm, ops, options.piece_bytes, std::move(hierarchy));
      return choice;
    }
    choice.why = "KOLO_HIERARCHICAL_ALLREDUCE=1, but " + why_not + "; allreduce is flat";
    choice.fallback = true;
  }
  choice.mover = MakeMpiMover(comm, ops, options.piece_bytes);
  return choice;
}

}  // namespace kolo
