// Value types of the public API: data types, reduce operations, tensor views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};
constexpr int kNumDataTypes = 11;

// Horovod's codes, so that a script's `op=<int>` means the same op in every
// binding. kAdasum is not elementwise: ops/adasum.h runs it.
enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kAdasum = 2,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
};
constexpr int kNumReduceOps = 6;

// Where a tensor's memory lives: kCpuDevice for host memory, otherwise a CUDA
// device ordinal.
constexpr int kCpuDevice = -1;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
std::string ShapeToString(const std::vector<int64_t>& shape);
std::string DeviceName(int device);

// A non-owning view of a dense, contiguous tensor.
struct TensorView {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int device = kCpuDevice;

  int64_t NumElements() const;
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DataTypeSize(dtype); }
};

}  // namespace kolo
