// How the fusion copy kernel (ops/cuda/kernels.cu) splits one tensor's copy:
// scalar elements up to the first 16-byte boundary, then 16-byte vectors
// (one load and one store of 16 bytes per thread and step, what a GPU's
// memory system moves fastest), then the scalar tail. Vectors need the source
// and the destination at the same offset from a 16-byte boundary; where they
// are not, every element goes one by one. Pure, so that the index arithmetic
// is tested without a device (test/unit/gpu_plans_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace kolo {

inline constexpr int kCopyVectorBytes = 16;

struct CopySplit {
  int64_t head = 0;     // elements before the first vector
  int64_t vectors = 0;  // 16-byte vectors after them
  int64_t tail = 0;     // elements after the last vector
};

// `count` elements of `elem_size` bytes from address `src` to address `dst`.
constexpr CopySplit SplitForVectors(uintptr_t src, uintptr_t dst, int64_t count, int elem_size) {
  const uintptr_t offset = src % kCopyVectorBytes;
  if (count <= 0 || elem_size <= 0 || kCopyVectorBytes % elem_size != 0 ||
      offset != dst % kCopyVectorBytes || offset % elem_size != 0) {
    return {count > 0 ? count : 0, 0, 0};
  }
  const int64_t per_vector = kCopyVectorBytes / elem_size;
  const int64_t head = std::min<int64_t>(
      count, static_cast<int64_t>((kCopyVectorBytes - offset) % kCopyVectorBytes) / elem_size);
  const int64_t vectors = (count - head) / per_vector;
  return {head, vectors, count - head - vectors * per_vector};
}

}  // namespace kolo
