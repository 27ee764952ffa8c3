#include "base/rows.h"

#include <algorithm>

namespace kolo {

int64_t SplitRows(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

int64_t SplitBegin(int64_t rows, int size, int rank) {
  return rank * (rows / size) + std::min<int64_t>(rank, rows % size);
}

int64_t RowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t RowBytes(const std::vector<int64_t>& shape, DataType dtype) {
  return RowElements(shape) * static_cast<int64_t>(DataTypeSize(dtype));
}

std::vector<int64_t> RowsToBytes(const std::vector<int64_t>& rows, int64_t row_bytes) {
  std::vector<int64_t> bytes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) bytes[i] = rows[i] * row_bytes;
  return bytes;
}

std::vector<int64_t> StackedShape(std::vector<int64_t> shape, const std::vector<int64_t>& rows) {
  shape[0] = 0;
  for (int64_t r : rows) shape[0] += r;
  return shape;
}

std::vector<int64_t> BlockCounts(const std::vector<int64_t>& shape, int n) {
  std::vector<int64_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = SplitRows(shape[0], n, i) * RowElements(shape);
  return counts;
}

}  // namespace kolo
