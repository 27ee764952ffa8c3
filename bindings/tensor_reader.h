// How kolo._core reads a framework's tensors: the one way a tensor enters the
// core. Every collective entry of kolo._core takes a reader and the tensors
// themselves (one call however many tensors), and the reader makes the
// TensorViews: DLPack's fields (pointer, dtype, shape, strides, device,
// stream), read and checked here, in C++, for every binding.
//
// A framework's adapter makes one reader (kolo.common.engine.tensor_reader)
// and says what a good tensor is: an instance of `tensor_type`, a dtype of
// `dtypes`, laid out contiguously, on the host or a CUDA device, not sparse.
// How the fields are read is the reader's protocol:
//  - "attributes": torch.Tensor's (is_sparse, dtype, is_contiguous(),
//    data_ptr(), shape, is_cuda, is_cpu, get_device()), through the C API
//    with interned names;
//  - "buffer": the buffer protocol (pointer, shape, strides) and the `dtype`
//    attribute: NumPy's arrays, which TensorFlow and JAX hand over too.
// Nothing links against a framework. The checks are made once, here, in one
// order (TryRead); a tensor that fails one goes to the adapter's
// `refuse(tensor, what, index, check)`, which raises the adapter's own error
// for that check, so that the words are the framework's and the checks are
// not written twice.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo {

// The check a tensor failed; its name (CheckName) is what `refuse` gets.
enum class FailedCheck { kNone, kType, kSparse, kDtype, kContiguous, kDevice };
const char* CheckName(FailedCheck check);

class TensorReader {
 public:
  enum class Protocol { kAttributes, kBuffer };

  // `dtypes`: {framework dtype: kolo::DataType code}. `refuse(tensor, what,
  // index, check)` raises the adapter's error for a tensor that fails `check`
  // (index None for a single tensor). `stream(tensor)`: the CUDA stream that
  // produces a device tensor, an int (None: the protocol has no devices).
  TensorReader(const std::string& protocol, pybind11::object tensor_type, pybind11::dict dtypes,
               pybind11::object refuse, pybind11::object stream);

  // The view of `tensor`, checked; raises (through `refuse`) when it fails a
  // check. `index` is its place in a list, or -1.
  TensorView Read(pybind11::handle tensor, const char* what, Py_ssize_t index) const;
  // Every tensor of a sequence, in order; the first that fails a check is
  // refused.
  std::vector<TensorView> ReadList(pybind11::handle tensors, const char* what) const;
  // The views of `outputs` (tensors the adapter made like `inputs`, one per
  // input): their data pointers with the inputs' dtypes, shapes and devices.
  std::vector<TensorView> ReadOutputs(pybind11::handle outputs,
                                      const std::vector<TensorView>& inputs) const;
  // The data pointer of a tensor the adapter made (an output).
  void* Data(pybind11::handle tensor) const;
  // The stream that produces `tensor` (read already as `view`), 0 on the host.
  uintptr_t Stream(pybind11::handle tensor, const TensorView& view) const;
  // The stream that produces the first of `tensors` (read as `views`).
  uintptr_t FirstStream(pybind11::handle tensors, const std::vector<TensorView>& views) const;

 private:
  // Reads and checks `tensor` into `view`; the first check it fails.
  FailedCheck TryRead(PyObject* tensor, TensorView* view) const;
  FailedCheck ReadAttributes(PyObject* tensor, TensorView* view) const;
  FailedCheck ReadBuffer(PyObject* tensor, TensorView* view) const;
  // The core's code of a framework dtype, or -1.
  int DtypeCode(const pybind11::object& dtype) const;
  [[noreturn]] void Refuse(pybind11::handle tensor, const char* what, Py_ssize_t index,
                           FailedCheck check) const;

  Protocol protocol_;
  pybind11::object tensor_type_;
  pybind11::dict dtypes_;
  pybind11::object refuse_;
  pybind11::object stream_;
  // Attribute names, interned once.
  pybind11::object is_sparse_, dtype_, is_contiguous_, data_ptr_, shape_, is_cuda_, is_cpu_,
      get_device_;
};

// Adds TensorReader to kolo._core: made by adapters, with `check(tensor,
// what, index=None)` for a check before an adapter allocates a result.
void RegisterTensorReader(pybind11::module_& m);

}  // namespace kolo
