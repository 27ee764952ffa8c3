// Adasum: Horovod's adaptive summation (Maleki et al., "Scaling Distributed
// Training with Adaptive Summation"), on host memory over MPI point-to-point.
//
// Two gradients a and b combine as
//   a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// which is their sum when they are orthogonal and their average when they are
// parallel. Over n ranks (a power of two) the combination runs as recursive
// vector halving, distance doubling: at distance d = 1, 2, 4, ... a rank swaps
// half of its part of the buffer with rank ^ d and combines the half it keeps
// with its partner's copy of it. The dot product and the squared norms are
// those of whole tensors, not of the halves: each rank computes them on its
// slice, and they are summed over the 2d ranks that the slice's data came
// from. A fused buffer holds several tensors; each is combined with its own
// coefficients. The reverse, distance halving, allgathers the result.
//
// The pure steps (the halving plan, dot products and norms, the
// coefficients, the scaled add) are free functions, tested without MPI;
// Allreduce runs them over a communicator.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::adasum {

// Adasum reduces float16, float32 and float64 tensors (as Horovod's).
bool Supports(DataType dtype);
bool IsPowerOfTwo(int64_t n);

// How one level of vector halving splits a rank's part of a fused buffer,
// tensor by tensor. The left rank of a pair (rank & distance == 0) keeps the
// first total/2 elements (rounded down), the right rank the rest.
struct Halving {
  bool left = true;
  std::vector<int64_t> kept;   // per tensor: elements this rank keeps
  std::vector<int64_t> given;  // per tensor: elements it gives its partner
  int64_t kept_total = 0;
  int64_t given_total = 0;

  // Where, in elements from the start of the part, the kept and the given
  // halves begin.
  int64_t kept_offset() const { return left ? 0 : given_total; }
  int64_t given_offset() const { return left ? kept_total : 0; }
};

// Splits `counts` (elements per tensor of the part, one after the other).
Halving Halve(const std::vector<int64_t>& counts, bool left);

// The halvings rank `rank` of `size` (a power of two) goes through, at
// distances 1, 2, ..., size / 2; each level halves what the one before kept.
std::vector<Halving> Plan(const std::vector<int64_t>& counts, int rank, int size);

// The dot product of a and b and their squared norms, summed in double.
struct DotAndNorms {
  double dot = 0;
  double a_squared = 0;
  double b_squared = 0;
};
DotAndNorms ComputeDotAndNorms(const void* a, const void* b, int64_t count, DataType dtype);

// The coefficients of a and b in their combination. A vector whose squared
// norm is below sqrt(DBL_MIN) keeps the coefficient 1 (a zero gradient
// changes nothing), as in Horovod.
struct Coefficients {
  double a = 1;
  double b = 1;
};
Coefficients Combine(double dot, double a_squared, double b_squared);

// a = ca * a + cb * b, element by element: in double for float32 and
// float64, in float for float16 (as Horovod's vector code).
void ScaledAdd(void* a, double ca, const void* b, double cb, int64_t count, DataType dtype);

// The communicators of one Adasum allreduce.
struct Comms {
  // The ranks that halve and combine: partners are rank ^ distance.
  MPI_Comm pairs = MPI_COMM_NULL;
  // Ranks that hold other slices of the same tensors and run the same levels
  // at the same time (on the GPU path, the host's ranks after a
  // reduce-scatter within the host): their dot products and norms are
  // summed too. MPI_COMM_NULL when there are none.
  MPI_Comm slices = MPI_COMM_NULL;
};

// Reduces `buffer` (this rank's tensors of `counts` elements, one after the
// other) with Adasum over the ranks of comms.pairs, in place; every rank ends
// with the same bits. `scratch` grows to the buffer's size and is the
// caller's to keep. Collective over comms.pairs (and comms.slices).
Status Allreduce(const Comms& comms, void* buffer, const std::vector<int64_t>& counts,
                 DataType dtype, std::vector<uint8_t>* scratch);

}  // namespace kolo::adasum
