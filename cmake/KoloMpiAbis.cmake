# kolo's MPI layer (ops/, libkolo, kolo._core) is built once per MPI ABI found here, and
# kolo/_mpi_library.py chooses the build that matches the MPI a process runs on
# (docs/install.md, "MPI"). The ABIs:
#
#   ompi    Open MPI 4.1 and 5.0, libmpi.so.40
#   mpich   the MPICH ABI, libmpi.so.12: MPICH, Intel MPI, MVAPICH, Cray MPICH (cray-mpich-abi)
#   mpiabi  the MPI-5 standard ABI, libmpi_abi.so.1: MPICH 5, Intel MPI 2021.19 (Open MPI from 6.0)
#
# The MPI that FindMPI found (MPI::MPI_C) gives the first build, whose targets keep the
# plain names (kolo_ops, kolo, kolo._core). An MPICH installation's headers and libraries
# (KOLO_MPICH_HOME: PyPI's `mpich` in a virtual environment, a module's prefix) give the
# MPICH-ABI build and the standard-ABI build beside it, with the suffixes _mpich and
# _mpiabi, unless FindMPI's MPI already has that ABI.
#
# Sets KOLO_MPI_BUILDS: a list of "<abi>|<suffix>|<interface target>" entries that
# ops/, runtime/ and bindings/ each build one set of targets for (kolo_mpi_build_parts
# splits one).

include(CheckSymbolExists)

# kolo_mpi_abi_of(<var> <include dirs> <definitions>): "ompi", "mpich" or "mpiabi" for the
# mpi.h those include directories give, "" for any other MPI.
function(kolo_mpi_abi_of var includes definitions)
  set(CMAKE_REQUIRED_INCLUDES ${includes})
  list(TRANSFORM definitions PREPEND "-D" OUTPUT_VARIABLE CMAKE_REQUIRED_DEFINITIONS)
  set(CMAKE_REQUIRED_QUIET ON)
  unset(_kolo_is_abi CACHE)
  unset(_kolo_is_ompi CACHE)
  unset(_kolo_is_mpich CACHE)
  check_symbol_exists(MPI_ABI_VERSION "mpi.h" _kolo_is_abi)
  check_symbol_exists(OPEN_MPI "mpi.h" _kolo_is_ompi)
  check_symbol_exists(MPICH_NAME "mpi.h" _kolo_is_mpich)
  if(_kolo_is_abi)
    set(${var} mpiabi PARENT_SCOPE)
  elseif(_kolo_is_ompi)
    set(${var} ompi PARENT_SCOPE)
  elseif(_kolo_is_mpich)
    set(${var} mpich PARENT_SCOPE)
  else()
    set(${var} "" PARENT_SCOPE)
  endif()
  unset(_kolo_is_abi CACHE)
  unset(_kolo_is_ompi CACHE)
  unset(_kolo_is_mpich CACHE)
endfunction()

kolo_mpi_abi_of(_kolo_first_abi "${MPI_C_INCLUDE_DIRS}" "")
if(NOT _kolo_first_abi)
  message(FATAL_ERROR "kolo: FindMPI's mpi.h (${MPI_C_INCLUDE_DIRS}) is neither Open MPI's nor "
    "of the MPICH family: kolo builds against Open MPI 4.1/5.0 or an MPICH-ABI MPI")
endif()
set(KOLO_MPI_BUILDS "${_kolo_first_abi}||MPI::MPI_C")

set(KOLO_MPICH_HOME "" CACHE PATH
  "An MPICH installation (include/mpi.h, lib/libmpi.so.12, lib/libmpi_abi.so.1): kolo is also built for the MPICH ABI and the MPI-5 standard ABI")
if(KOLO_MPICH_HOME)
  # kolo_mpi_build(<abi> <library> <definitions>): an interface target kolo_mpi_<abi> on
  # KOLO_MPICH_HOME's headers and <library>, added to KOLO_MPI_BUILDS unless FindMPI's
  # build has that ABI already.
  function(kolo_mpi_build abi library definitions)
    if(KOLO_MPI_BUILDS MATCHES "(^|;)${abi}\\|")
      return()
    endif()
    set(_lib "${KOLO_MPICH_HOME}/lib/${library}")
    if(NOT EXISTS "${_lib}")
      message(STATUS "kolo: no ${abi} build: ${_lib} does not exist")
      return()
    endif()
    kolo_mpi_abi_of(_found "${KOLO_MPICH_HOME}/include" "${definitions}")
    if(NOT _found STREQUAL abi)
      message(FATAL_ERROR "kolo: KOLO_MPICH_HOME=${KOLO_MPICH_HOME}: its mpi.h is not the ${abi} "
        "ABI's (found '${_found}')")
    endif()
    add_library(kolo_mpi_${abi} INTERFACE)
    target_include_directories(kolo_mpi_${abi} SYSTEM INTERFACE "${KOLO_MPICH_HOME}/include")
    target_compile_definitions(kolo_mpi_${abi} INTERFACE ${definitions})
    # By the library's soname, without a run path: at run time kolo/_mpi_library.py has
    # loaded the job's own library of that ABI.
    target_link_libraries(kolo_mpi_${abi} INTERFACE "${_lib}")
    set(KOLO_MPI_BUILDS "${KOLO_MPI_BUILDS};${abi}|_${abi}|kolo_mpi_${abi}" PARENT_SCOPE)
  endfunction()
  kolo_mpi_build(mpich libmpi.so.12 "")
  kolo_mpi_build(mpiabi libmpi_abi.so.1 "MPI_ABI")
endif()
message(STATUS "kolo: MPI builds (abi|suffix|target): ${KOLO_MPI_BUILDS}")

# kolo_mpi_build_parts(<entry> <abi var> <suffix var> <target var>): one entry's fields.
function(kolo_mpi_build_parts entry abi suffix target)
  string(REPLACE "|" ";" _parts "${entry}")
  list(GET _parts 0 _abi)
  list(GET _parts 1 _suffix)
  list(GET _parts 2 _target)
  set(${abi} "${_abi}" PARENT_SCOPE)
  set(${suffix} "${_suffix}" PARENT_SCOPE)
  set(${target} "${_target}" PARENT_SCOPE)
endfunction()
