// kolo._core's XLA FFI handlers for kolo.jax (built when XLA's FFI headers
// are found; see bindings/CMakeLists.txt).
#pragma once

namespace kolo {

class Runtime;

// The running runtime, or nullptr when kolo is not initialized or was shut
// down in this process (defined in core_module.cc).
Runtime* RunningRuntime();

// The XLA_FFI_Handler of kolo.jax's allreduce inside jit, for
// jax.ffi.register_ffi_target (wrapped in a PyCapsule by the module).
void* JaxAllreduceHandler();

}  // namespace kolo
