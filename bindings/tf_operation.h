// One operation of the TensorFlow op library's C table (tensorflow/kolo_tf_abi.h)
// on kolo's runtime: the table's start() without the Python module around it,
// so that C++ tests run it on a runtime of their own.
#ifndef KOLO_BINDINGS_TF_OPERATION_H_
#define KOLO_BINDINGS_TF_OPERATION_H_

#include <cstdint>

#include "kolo/runtime.h"
#include "tensorflow/kolo_tf_abi.h"

namespace kolo {

// Enqueues `request` on `count` tensors (host or device memory, as each
// KoloTfTensor says; device tensors ordered after `request.cuda_stream`) and
// calls `done(context, outcome)` once: when the runtime has finished it (for
// device tensors, when the device work has), on the caller's thread when
// `request.caller_waits`, or at once when it is refused. A null or stopped
// `rt` is refused with "kolo is not running".
void StartTfOperation(Runtime* rt, const KoloTfRequest& request, int32_t count,
                      const KoloTfTensor* inputs, const KoloTfTensor* outputs, KoloTfDone done,
                      void* context);

}  // namespace kolo

#endif  // KOLO_BINDINGS_TF_OPERATION_H_
