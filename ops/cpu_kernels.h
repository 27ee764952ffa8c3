// CPU kernels: float16 / bfloat16 conversion and reduction, scaling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kolo/types.h"

namespace kolo {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    // value = mant * 2^(exp - 150); in units of 2^-24 that is mant >> (126 - exp).
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    uint32_t half_mant = mant >> shift;  // rounded to nearest even below
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

// data[i] *= factor for `count` elements of `dtype` (host memory), as Horovod
// scales: integer types in double, truncated toward zero; floats in their own
// precision (16-bit ones in float).
void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor);

// data[i] /= divisor: an average's last step. The quotient a single process
// dividing the sum gets: rounded once for floats, truncated toward zero for
// integers. (Multiplying by 1/3 in float differs from it in the last bit for a
// third of all values.)
void DivideBuffer(void* data, int64_t count, DataType dtype, int divisor);

// inout[i] = op(in[i], inout[i]) for 16-bit floats; used by the custom MPI ops.
void ReduceHalf(const uint16_t* in, uint16_t* inout, int64_t count, ReduceOp op, bool bfloat);

// inout[i] = op(in[i], inout[i]) for any dtype, with MPI's meaning: integers
// wrap on overflow, kAverage is the sum, bool sum/max are "or" and min/product
// are "and".
void ReduceInto(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op);
// out[i] = op(in[i], acc[i]), as ReduceInto would leave acc; `out` is `acc` or
// does not overlap it. Saves copying `acc` to `out` first.
void ReduceTo(const void* in, const void* acc, void* out, int64_t count, DataType dtype,
              ReduceOp op);

// memcpy with non-temporal stores: the destination's cache lines go to memory
// without first being read into this core's cache, or taken back from another
// core's. Ends with a store fence, so a release store after it publishes the
// copy. A plain memcpy on other architectures.
void StreamingCopy(void* dst, const void* src, size_t bytes);

}  // namespace kolo
