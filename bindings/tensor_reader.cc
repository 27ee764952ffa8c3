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

void* Pointer(const py::object& value) {
  void* data = PyLong_AsVoidPtr(value.ptr());
  if (data == nullptr && PyErr_Occurred()) throw py::error_already_set();
  return data;
}

// A buffer taken with the buffer protocol, released when it goes out of scope.
class Buffer {
 public:
  // Pointer, shape and strides; no format (NumPy has none for bfloat16).
  explicit Buffer(PyObject* o) {
    if (PyObject_GetBuffer(o, &view_, PyBUF_STRIDES) != 0) throw py::error_already_set();
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const Py_buffer& view() const { return view_; }

 private:
  Py_buffer view_{};
};

}  // namespace

const char* CheckName(FailedCheck check) {
  switch (check) {
    case FailedCheck::kNone:
      return "none";
    case FailedCheck::kType:
      return "type";
    case FailedCheck::kSparse:
      return "sparse";
    case FailedCheck::kDtype:
      return "dtype";
    case FailedCheck::kContiguous:
      return "contiguous";
    case FailedCheck::kDevice:
      return "device";
  }
  return "unknown";
}

TensorReader::TensorReader(const std::string& protocol, py::object tensor_type, py::dict dtypes,
                           py::object refuse, py::object stream)
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
      is_cpu_(Interned("is_cpu")),
      get_device_(Interned("get_device")) {
  if (protocol == "attributes") {
    protocol_ = Protocol::kAttributes;
  } else if (protocol == "buffer") {
    protocol_ = Protocol::kBuffer;
  } else {
    throw py::value_error("unknown reader protocol '" + protocol +
                          "' (\"attributes\" or \"buffer\")");
  }
  if (!PyType_Check(tensor_type_.ptr())) throw py::type_error("tensor_type must be a type");
  for (auto item : dtypes_) {
    int code = item.second.cast<int>();
    if (code < 0 || code >= kNumDataTypes) {
      throw py::value_error("unknown dtype code " + std::to_string(code));
    }
  }
}

int TensorReader::DtypeCode(const py::object& dtype) const {
  PyObject* code = PyDict_GetItemWithError(dtypes_.ptr(), dtype.ptr());  // borrowed
  if (code == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return -1;
  }
  const int64_t value = Int(code);
  return value >= 0 && value < kNumDataTypes ? static_cast<int>(value) : -1;
}

// Every check of every binding, in this order: what the tensor is, its
// layout kind, its dtype, its layout, its device. The protocols differ only
// in how they read the fields.
FailedCheck TensorReader::TryRead(PyObject* t, TensorView* view) const {
  if (!PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(tensor_type_.ptr()))) {
    return FailedCheck::kType;
  }
  return protocol_ == Protocol::kAttributes ? ReadAttributes(t, view) : ReadBuffer(t, view);
}

// A field is read only once the checks before it passed: a sparse tensor has
// no is_contiguous() or data_ptr().
FailedCheck TensorReader::ReadAttributes(PyObject* t, TensorView* view) const {
  if (Truth(Attr(t, is_sparse_))) return FailedCheck::kSparse;
  const int code = DtypeCode(Attr(t, dtype_));
  if (code < 0) return FailedCheck::kDtype;
  if (!Truth(Call(t, is_contiguous_))) return FailedCheck::kContiguous;
  view->device = kCpuDevice;
  if (!Truth(Attr(t, is_cpu_))) {
    if (!Truth(Attr(t, is_cuda_))) return FailedCheck::kDevice;  // meta, MPS, XLA
    view->device = static_cast<int>(Int(Call(t, get_device_).ptr()));
  }
  view->dtype = static_cast<DataType>(code);
  view->data = Pointer(Call(t, data_ptr_));
  py::object shape = Attr(t, shape_);
  // torch.Size is a tuple; PySequence_Fast would copy it into a list.
  if (!PyTuple_Check(shape.ptr())) {
    shape = Owned(PySequence_Fast(shape.ptr(), "shape is not a sequence"));
  }
  const Py_ssize_t dims = PySequence_Fast_GET_SIZE(shape.ptr());
  PyObject** dim = PySequence_Fast_ITEMS(shape.ptr());
  view->shape.resize(static_cast<size_t>(dims));
  for (Py_ssize_t i = 0; i < dims; ++i) view->shape[i] = Int(dim[i]);
  return FailedCheck::kNone;
}

FailedCheck TensorReader::ReadBuffer(PyObject* t, TensorView* view) const {
  const int code = DtypeCode(Attr(t, dtype_));
  if (code < 0) return FailedCheck::kDtype;
  Buffer buffer(t);
  const Py_buffer& b = buffer.view();
  if (!PyBuffer_IsContiguous(&b, 'C')) return FailedCheck::kContiguous;
  view->dtype = static_cast<DataType>(code);
  view->device = kCpuDevice;
  view->data = b.buf;
  view->shape.assign(b.shape, b.shape + b.ndim);
  return FailedCheck::kNone;
}

void TensorReader::Refuse(py::handle tensor, const char* what, Py_ssize_t index,
                          FailedCheck check) const {
  refuse_(tensor, what, index < 0 ? py::none() : py::object(py::int_(index)), CheckName(check));
  // The adapter did not raise: it has no words for this check.
  std::string input = index < 0 ? what : std::string(what) + " input " + std::to_string(index);
  throw py::type_error(input + ": kolo could not read the tensor (a " +
                       Py_TYPE(tensor.ptr())->tp_name + "; check '" + CheckName(check) +
                       "' failed)");
}

TensorView TensorReader::Read(py::handle tensor, const char* what, Py_ssize_t index) const {
  TensorView view;
  FailedCheck failed = TryRead(tensor.ptr(), &view);
  if (failed != FailedCheck::kNone) Refuse(tensor, what, index, failed);
  return view;
}

std::vector<TensorView> TensorReader::ReadList(py::handle tensors, const char* what) const {
  py::object items = Owned(PySequence_Fast(tensors.ptr(), "expected a list of tensors"));
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items.ptr());
  PyObject** item = PySequence_Fast_ITEMS(items.ptr());
  std::vector<TensorView> views(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    FailedCheck failed = TryRead(item[i], &views[i]);
    if (failed != FailedCheck::kNone) Refuse(item[i], what, i, failed);
  }
  return views;
}

std::vector<TensorView> TensorReader::ReadOutputs(py::handle outputs,
                                                  const std::vector<TensorView>& inputs) const {
  py::object items = Owned(PySequence_Fast(outputs.ptr(), "expected a list of outputs"));
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items.ptr());
  if (static_cast<size_t>(n) != inputs.size()) {
    throw py::value_error("one output per input needed: " + std::to_string(inputs.size()) +
                          " inputs, " + std::to_string(n) + " outputs");
  }
  PyObject** item = PySequence_Fast_ITEMS(items.ptr());
  std::vector<TensorView> views = inputs;
  for (Py_ssize_t i = 0; i < n; ++i) views[i].data = Data(item[i]);
  return views;
}

void* TensorReader::Data(py::handle tensor) const {
  if (protocol_ == Protocol::kAttributes) return Pointer(Call(tensor.ptr(), data_ptr_));
  Buffer buffer(tensor.ptr());
  return buffer.view().buf;
}

uintptr_t TensorReader::Stream(py::handle tensor, const TensorView& view) const {
  if (view.device == kCpuDevice || stream_.is_none()) return 0;
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
      .def(py::init<const std::string&, py::object, py::dict, py::object, py::object>(),
           py::arg("protocol"), py::arg("tensor_type"), py::arg("dtypes"), py::arg("refuse"),
           py::arg("stream"))
      .def(
          "check",
          [](const TensorReader& reader, py::handle tensor, const std::string& what,
             py::object index) {
            reader.Read(tensor, what.c_str(), index.is_none() ? -1 : index.cast<Py_ssize_t>());
          },
          py::arg("tensor"), py::arg("what"), py::arg("index") = py::none(),
          "Checks `tensor` as the collectives do; raises the adapter's error when it fails.");
}

}  // namespace kolo
