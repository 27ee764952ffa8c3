/* The C interface between kolo._core and kolo's TensorFlow op library
 * (kolo_tf_ops.cc). The op library is compiled against one TensorFlow's
 * headers (its C++ ABI changes with each minor version) and kolo._core against
 * none, so the two meet here, in C: the library never sees kolo's C++ types,
 * and one _core serves the op library of every TensorFlow version.
 *
 * kolo._core.tf_abi() gives the address of a KoloTfAbi; the op library takes
 * it once through its exported kolo_tf_set_abi(). Integers are kolo's own
 * codes: DataType (base/include/kolo/types.h), ReduceOp, StatusCode
 * (kolo/status.h); bindings/tf_abi.cc checks that they match. */
#ifndef KOLO_BINDINGS_TENSORFLOW_KOLO_TF_ABI_H_
#define KOLO_BINDINGS_TENSORFLOW_KOLO_TF_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below changes; the op library refuses another. */
#define KOLO_TF_ABI_VERSION 3

enum KoloTfKind {
  KOLO_TF_ALLREDUCE = 0,     /* grouped, outputs given (may alias the inputs) */
  KOLO_TF_ALLGATHER = 1,     /* grouped, results in the outcome */
  KOLO_TF_BROADCAST = 2,     /* each tensor in place on its output (a group: one per tensor) */
  KOLO_TF_ALLTOALL = 3,      /* one tensor, splits; result and received splits in the outcome */
  KOLO_TF_REDUCESCATTER = 4, /* grouped, results in the outcome */
  KOLO_TF_JOIN = 5,          /* no tensors; the outcome's value: the last rank to join */
  KOLO_TF_BARRIER = 6        /* no tensors */
};

enum KoloTfDataType {
  KOLO_TF_UINT8 = 0,
  KOLO_TF_INT8 = 1,
  KOLO_TF_UINT16 = 2,
  KOLO_TF_INT16 = 3,
  KOLO_TF_INT32 = 4,
  KOLO_TF_INT64 = 5,
  KOLO_TF_FLOAT16 = 6,
  KOLO_TF_BFLOAT16 = 7,
  KOLO_TF_FLOAT32 = 8,
  KOLO_TF_FLOAT64 = 9,
  KOLO_TF_BOOL = 10
};

/* A tensor's device: host memory, or a CUDA device ordinal (0, 1, ...). */
#define KOLO_TF_HOST (-1)

/* StatusCode values the op library tells apart. */
enum KoloTfCode { KOLO_TF_OK = 0, KOLO_TF_INVALID_ARGUMENT = 1 };

typedef struct {
  void* data;
  int32_t dtype; /* KoloTfDataType */
  int32_t ndim;
  const int64_t* shape;
  int32_t device; /* KOLO_TF_HOST, or the CUDA device whose memory `data` is */
} KoloTfTensor;

typedef struct {
  int32_t kind;          /* KoloTfKind */
  const char* name;      /* "" leaves the name to kolo, which then reports call_site */
  const char* call_site; /* the Python line that made the op, for kolo's errors */
  int32_t process_set;
  int32_t reduce_op; /* allreduce, reducescatter */
  double prescale;
  double postscale;
  int32_t root;          /* broadcast: the root's rank within the set */
  const int64_t* splits; /* alltoall: rows for each rank of the set; none: even */
  int32_t num_splits;
  /* 1: the caller blocks until done (TensorFlow executing eagerly): start()
   * runs the operation's round on the calling thread where kolo lets callers
   * (KOLO_CALLER_RUNS) and reports back before it returns. */
  int32_t caller_waits;
  /* Device tensors: the CUDA stream (cudaStream_t) of the work that produces
   * them, TensorFlow's stream for the op; kolo's collective runs after the work
   * enqueued on it so far, without blocking the caller. */
  void* cuda_stream;
} KoloTfRequest;

/* One result that kolo allocated (allgather, alltoall, reducescatter): in host
 * memory, or for device tensors in memory of `device`, where the collective has
 * finished writing it. */
typedef struct {
  const void* data;
  int32_t device; /* KOLO_TF_HOST or the CUDA device of `data` */
  size_t bytes;
  int32_t ndim;
  const int64_t* shape;
  const int64_t* received_splits; /* alltoall */
  int32_t num_received_splits;
} KoloTfResult;

typedef struct {
  int32_t code;        /* KoloTfCode or another StatusCode; 0 is success */
  const char* message; /* kolo's error, "" on success */
  int32_t num_results;
  const KoloTfResult* results;
  int32_t value; /* join */
  /* The outcome stays valid until the op library calls release(keep), once. */
  void* keep;
  void (*release)(void* keep);
} KoloTfOutcome;

/* Called once per started operation, on kolo's background thread (or at once
 * on the caller's, for an operation refused when it was started, or run by a
 * caller that waits); it must not wait for another collective. For device
 * tensors it is called once the device work has finished: the outputs and the
 * results hold the collective's values. */
typedef void (*KoloTfDone)(void* context, const KoloTfOutcome* outcome);

typedef struct {
  int32_t version; /* KOLO_TF_ABI_VERSION */
  /* Starts one operation on `count` tensors; `outputs`: allreduce's targets
   * and broadcast's tensors (may equal `inputs`), else NULL. */
  void (*start)(const KoloTfRequest* request, int32_t count, const KoloTfTensor* inputs,
                const KoloTfTensor* outputs, KoloTfDone done, void* context);
} KoloTfAbi;

/* The op library exports int32_t kolo_tf_set_abi(const KoloTfAbi*): 0 when it
 * takes the table, -1 for a table of another version. */

#ifdef __cplusplus
}
#endif

#endif /* KOLO_BINDINGS_TENSORFLOW_KOLO_TF_ABI_H_ */
