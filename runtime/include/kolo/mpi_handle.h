// A communicator as a number and back, for code that has mpi.h (kolo's own,
// tests, C++ programs): InitOptions::comm takes a handle so that kolo's public
// API is the same for every MPI ABI. Open MPI's and the standard ABI's handles
// are pointers, the MPICH ABI's integers; mpi4py's MPI._handleof(comm) gives
// the same number.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <type_traits>

namespace kolo {

template <typename Comm = MPI_Comm>
uintptr_t HandleOfComm(Comm comm) {
  if constexpr (std::is_pointer_v<Comm>) {
    return reinterpret_cast<uintptr_t>(comm);
  } else {
    return static_cast<uintptr_t>(comm);
  }
}

// 0 (no handle) is MPI_COMM_WORLD.
template <typename Comm = MPI_Comm>
Comm CommFromHandle(uintptr_t handle) {
  if (handle == 0) return MPI_COMM_WORLD;
  if constexpr (std::is_pointer_v<Comm>) {
    return reinterpret_cast<Comm>(handle);
  } else {
    return static_cast<Comm>(handle);
  }
}

}  // namespace kolo
