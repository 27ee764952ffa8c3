// kolorun's PRRTE shim, libkolo_prrte.so: PRRTE 3.0 (Open MPI 5.0's runtime;
// 3.0.14 and its branch's head) overruns an array in every daemon that takes
// part in an MPI_Comm_spawn (or a connect) spanning more than one host. Its
// connect_release (src/prted/pmix/pmix_server_dyn.c) makes an array of one
// pmix_info_t with PMIx_Info_create(1), unless PRRTE assigned a context id
// (Open MPI never asks for one), and then destructs its second element:
// PMIx_Info_destruct reads a type from the next heap chunk, frees what that
// seems to point at and clears it. mpirun or a daemon then dies of a
// corrupted heap ("double free or corruption", "corrupted double-linked
// list") in some runs, and PRRTE ends the job; valgrind reports the overrun
// in every run. Preloaded into mpirun and its daemons, the shim makes every
// PMIx_Info_create(n) from PRRTE give n + 1 elements, the last one
// constructed and empty, which the overrun then destructs harmlessly.
// PRRTE 4 rewrote that function; the extra element costs one info's size.
#pragma once

namespace kolo::launcher {

inline constexpr const char* kPrrteLibraryName = "libkolo_prrte.so";

}  // namespace kolo::launcher
