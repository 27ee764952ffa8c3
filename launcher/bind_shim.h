// kolorun's bind shim, libkolo_bind.so: Open MPI 4.1 listens on every
// interface (its out-of-band channel in mpirun and the daemons, its TCP
// transport in the ranks) whatever oob_tcp_if_include / btl_tcp_if_include
// say, which only choose the addresses it advertises and connects to. Loaded
// with LD_PRELOAD, the shim turns a wildcard bind() made by Open MPI's TCP
// components into a bind to the address of the job's interface, and leaves
// every other bind() (the program's own servers) alone. MPICH's and Intel
// MPI's process manager, Hydra, listens on every interface too (mpiexec's
// control port, a proxy's port for the ranks' PMI): in Hydra's own programs,
// which run no code of the user's, the shim narrows every wildcard bind().
#pragma once

namespace kolo::launcher {

// Interfaces to listen on, comma-separated names ("lo", "eth0") or IPv4 networks
// ("10.0.0.0/24": the interfaces whose address lies in one). Read by the shim.
inline constexpr const char* kBindInterfaces = "KOLORUN_BIND_INTERFACES";
// The shim's path; kolo-rank preloads it into the program when set (multi-host jobs,
// where Open MPI's TCP transport listens in the ranks).
inline constexpr const char* kBindLibrary = "KOLORUN_BIND_LIBRARY";
inline constexpr const char* kBindLibraryName = "libkolo_bind.so";

}  // namespace kolo::launcher
