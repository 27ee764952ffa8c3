// How a tensor splits into rows and per-rank blocks: the arithmetic that the
// negotiation (expected shapes), the executor (result shapes, byte counts) and
// the data movers (each rank's slice) must agree on.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo {

// Rank `rank`'s share when `rows` rows (or elements) are split over `size`
// ranks: the first rows % size ranks get one more.
int64_t SplitRows(int64_t rows, int size, int rank);
// Where rank `rank`'s share starts in that split.
int64_t SplitBegin(int64_t rows, int size, int rank);

// Elements in one row (dimension 0 removed) and its size in bytes.
int64_t RowElements(const std::vector<int64_t>& shape);
int64_t RowBytes(const std::vector<int64_t>& shape, DataType dtype);

// Rows per rank (allgather's dim 0 of every rank, alltoall's splits) as bytes.
std::vector<int64_t> RowsToBytes(const std::vector<int64_t>& rows, int64_t row_bytes);

// `shape` with dimension 0 replaced by the sum of `rows`: the output of an
// allgather or alltoall.
std::vector<int64_t> StackedShape(std::vector<int64_t> shape, const std::vector<int64_t>& rows);

// Elements of each rank's block of a reducescatter of `shape` over n ranks.
std::vector<int64_t> BlockCounts(const std::vector<int64_t>& shape, int n);

}  // namespace kolo
