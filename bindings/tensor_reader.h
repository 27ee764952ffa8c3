// Reading a framework's tensors in C++: one call of kolo._core takes a
// tensor, or a whole list of them, and makes the TensorViews itself, instead
// of Python building a (pointer, dtype, shape, device) tuple per tensor for
// pybind11 to convert (2-3 µs per tensor; issue 35).
//
// A TensorReader is made once by a framework's adapter (kolo.torch._tensors)
// and says what a good tensor is: an instance of `tensor_type` that is not
// sparse, has a dtype in `dtypes` and is contiguous. It reads the attributes
// that torch.Tensor has (is_sparse, dtype, is_contiguous(), data_ptr(),
// shape, is_cuda, get_device()); nothing links against the framework. A
// tensor that fails a check goes to the adapter's `refuse(tensor, what,
// index)`, which raises the adapter's own error, so that the messages are
// written once, in Python.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo {

class TensorReader {
 public:
  // `dtypes`: {framework dtype: kolo::DataType code}. `refuse(tensor, what,
  // index)` raises the error for a tensor that fails a check (index None for
  // a single tensor). `stream(tensor)`: the CUDA stream that produces a
  // device tensor, an int.
  TensorReader(pybind11::object tensor_type, pybind11::dict dtypes, pybind11::object refuse,
               pybind11::object stream);

  // The view of `tensor`, checked; raises (through `refuse`) when it fails a
  // check. `index` is its place in a list, or -1.
  TensorView Read(pybind11::handle tensor, const char* what, Py_ssize_t index) const;
  // Every tensor of a list or tuple, in order; the first that fails a check
  // is refused.
  std::vector<TensorView> ReadList(pybind11::handle tensors, const char* what) const;
  // `tensor.data_ptr()` of a tensor the adapter made (an output).
  uintptr_t DataPtr(pybind11::handle tensor) const;
  // The stream that produces `tensor` (read already as `view`), 0 on the host.
  uintptr_t Stream(pybind11::handle tensor, const TensorView& view) const;
  // The stream that produces the first of `tensors` (read as `views`).
  uintptr_t FirstStream(pybind11::handle tensors, const std::vector<TensorView>& views) const;

 private:
  // Whether `tensor` passes the checks; fills `view` when it does.
  bool TryRead(PyObject* tensor, TensorView* view) const;
  [[noreturn]] void Refuse(pybind11::handle tensor, const char* what, Py_ssize_t index) const;

  pybind11::object tensor_type_;
  pybind11::dict dtypes_;
  pybind11::object refuse_;
  pybind11::object stream_;
  // Attribute names, interned once.
  pybind11::object is_sparse_, dtype_, is_contiguous_, data_ptr_, shape_, is_cuda_, get_device_;
};

// Adds TensorReader to kolo._core.
void RegisterTensorReader(pybind11::module_& m);

}  // namespace kolo
