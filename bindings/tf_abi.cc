// The C table that kolo._core.tf_abi() hands to the TensorFlow op library
// (tensorflow/kolo_tf_abi.h): its start() runs the operation on the process's
// running runtime (tf_operation.h).
#include "tf_abi.h"

#include "module_state.h"
#include "tf_operation.h"

namespace kolo {
namespace {

void Start(const KoloTfRequest* request, int32_t count, const KoloTfTensor* inputs,
           const KoloTfTensor* outputs, KoloTfDone done, void* context) {
  StartTfOperation(RunningRuntime(), *request, count, inputs, outputs, done, context);
}

}  // namespace

const KoloTfAbi& TfAbi() {
  static const KoloTfAbi abi{KOLO_TF_ABI_VERSION, &Start};
  return abi;
}

}  // namespace kolo
