#include <sstream>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

std::string Status::ToString() const {
  static const char* const kNames[] = {"OK",      "INVALID_ARGUMENT", "PRECONDITION_FAILED",
                                       "ABORTED", "INTERNAL",         "UNIMPLEMENTED"};
  if (ok()) return "OK";
  return std::string(kNames[static_cast<int>(code_)]) + ": " + message_;
}

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt16:
      return "uint16";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kBool:
      return "bool";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAdasum:
      return "adasum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::string DeviceName(int device) {
  return device == kCpuDevice ? "cpu" : "cuda:" + std::to_string(device);
}

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace kolo
