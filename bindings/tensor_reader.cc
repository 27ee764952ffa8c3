// Reading a framework's tensors in C++ (tensor_reader.h). The attribute reads
// go through the C API with interned names: pybind11's attr("name") makes a
// new string per call, and these run per tensor on every step.
#include "tensor_reader.h"

#include <string>
#include <utility>

namespace py = pybind11;

namespace kolo {
namespace {

py::object Interned(const char* name) {
  return py::reinterpret_steal<py::object>(PyUnicode_InternFromString(name));
}

// A new reference from the C API, or the pending Python error as an exception.
py::object Owned(PyObject* p) {
  if (p == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(p);
}

py::object Attr(PyObject* o, const py::object& name) {
  return Owned(PyObject_GetAttr(o, name.ptr()));
}

py::object Call(PyObject* o, const py::object& method) {
  return Owned(PyObject_CallMethodObjArgs(o, method.ptr(), nullptr));
}

bool Truth(const py::object& o) {
  int t = PyObject_IsTrue(o.ptr());
  if (t < 0) throw py::error_already_set();
  return t == 1;
}

int64_t Int(PyObject* o) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

}  // namespace

TensorReader::TensorReader(py::object tensor_type, py::dict dtypes, py::object refuse,
                           py::object stream)
    : tensor_type_(std::move(tensor_type)),
      dtypes_(std::move(dtypes)),
      refuse_(std::move(refuse)),
      stream_(std::move(stream)),
      is_sparse_(Interned("is_sparse")),
      dtype_(Interned("dtype")),
      is_contiguous_(Interned("is_contiguous")),
      data_ptr_(Interned("data_ptr")),
      shape_(Interned("shape")),
      is_cuda_(Interned("is_cuda")),
      get_device_(Interned("get_device")) {
  if (!PyType_Check(tensor_type_.ptr())) throw py::type_error("tensor_type must be a type");
  for (auto item : dtypes_) {
    int code = item.second.cast<int>();
    if (code < 0 || code >= kNumDataTypes) {
      throw py::value_error("unknown dtype code " + std::to_string(code));
    }
  }
}

// The checks of the adapter's check_tensor, in its order; the first that
// fails leaves the error to it.
bool TensorReader::TryRead(PyObject* t, TensorView* view) const {
  if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(tensor_type_.ptr()))) return false;
  if (Truth(Attr(t, is_sparse_))) return false;
  py::object dtype = Attr(t, dtype_);
  PyObject* code = PyDict_GetItemWithError(dtypes_.ptr(), dtype.ptr());  // borrowed
  if (code == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return false;
  }
  if (!Truth(Call(t, is_contiguous_))) return false;
  const int64_t dtype_code = Int(code);
  if (dtype_code < 0 || dtype_code >= kNumDataTypes) return false;  // the table was changed
  view->dtype = static_cast<DataType>(dtype_code);
  py::object ptr = Call(t, data_ptr_);
  view->data = PyLong_AsVoidPtr(ptr.ptr());
  if (view->data == nullptr && PyErr_Occurred()) throw py::error_already_set();
  py::object shape = Attr(t, shape_);
  // torch.Size is a tuple; PySequence_Fast would copy it into a list.
  if (!PyTuple_Check(shape.ptr())) {
    shape = Owned(PySequence_Fast(shape.ptr(), "shape is not a sequence"));
  }
  const Py_ssize_t dims = PySequence_Fast_GET_SIZE(shape.ptr());
  PyObject** dim = PySequence_Fast_ITEMS(shape.ptr());
  view->shape.resize(static_cast<size_t>(dims));
  for (Py_ssize_t i = 0; i < dims; ++i) view->shape[i] = Int(dim[i]);
  view->device = kCpuDevice;
  if (Truth(Attr(t, is_cuda_))) view->device = static_cast<int>(Int(Call(t, get_device_).ptr()));
  return true;
}

void TensorReader::Refuse(py::handle tensor, const char* what, Py_ssize_t index) const {
  refuse_(tensor, what, index < 0 ? py::none() : py::object(py::int_(index)));
  // The adapter accepted what its fast form refused: they disagree.
  std::string input = index < 0 ? what : std::string(what) + " input " + std::to_string(index);
  throw py::type_error(input + ": kolo could not read the tensor (a " +
                       Py_TYPE(tensor.ptr())->tp_name + ")");
}

TensorView TensorReader::Read(py::handle tensor, const char* what, Py_ssize_t index) const {
  TensorView view;
  if (!TryRead(tensor.ptr(), &view)) Refuse(tensor, what, index);
  return view;
}

std::vector<TensorView> TensorReader::ReadList(py::handle tensors, const char* what) const {
  py::object items = Owned(PySequence_Fast(tensors.ptr(), "expected a list of tensors"));
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items.ptr());
  PyObject** item = PySequence_Fast_ITEMS(items.ptr());
  std::vector<TensorView> views(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!TryRead(item[i], &views[i])) Refuse(item[i], what, i);
  }
  return views;
}

uintptr_t TensorReader::DataPtr(py::handle tensor) const {
  py::object ptr = Call(tensor.ptr(), data_ptr_);
  void* data = PyLong_AsVoidPtr(ptr.ptr());
  if (data == nullptr && PyErr_Occurred()) throw py::error_already_set();
  return reinterpret_cast<uintptr_t>(data);
}

uintptr_t TensorReader::Stream(py::handle tensor, const TensorView& view) const {
  if (view.device == kCpuDevice) return 0;
  return stream_(tensor).cast<uintptr_t>();
}

uintptr_t TensorReader::FirstStream(py::handle tensors,
                                    const std::vector<TensorView>& views) const {
  if (views.empty() || views[0].device == kCpuDevice) return 0;
  py::object first = Owned(PySequence_GetItem(tensors.ptr(), 0));
  return Stream(first, views[0]);
}

void RegisterTensorReader(py::module_& m) {
  py::class_<TensorReader>(m, "TensorReader",
                           "How kolo._core reads a framework's tensors (tensor_reader.h).")
      .def(py::init<py::object, py::dict, py::object, py::object>(), py::arg("tensor_type"),
           py::arg("dtypes"), py::arg("refuse"), py::arg("stream"));
}

}  // namespace kolo
