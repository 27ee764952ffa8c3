// kolo._core's side of the TensorFlow op library's C interface
// (tensorflow/kolo_tf_abi.h).
#ifndef KOLO_BINDINGS_TF_ABI_H_
#define KOLO_BINDINGS_TF_ABI_H_

#include "tensorflow/kolo_tf_abi.h"

namespace kolo {

// The table that kolo._core.tf_abi() hands to the op library: it starts the
// operations on the process's running runtime.
const KoloTfAbi& TfAbi();

}  // namespace kolo

#endif  // KOLO_BINDINGS_TF_ABI_H_
