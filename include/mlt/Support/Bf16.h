//===- Bf16.h - float <-> bfloat16 on the host ------------------*- C++ -*-===//
//
// Part of mlt. The one host definition of bfloat16 conversion, for the CPU
// kernels, the in-process collectives, the safetensors reader and writer and
// the CUDA backend's host code alike. bfloat16 is stored as uint16_t (the high
// half of a float32). float -> bfloat16 rounds to nearest, ties to even,
// keeps infinities and maps every NaN to the quiet NaN 0x7FC0, as PyTorch's
// c10::BFloat16 does; bfloat16 -> float is exact. The CUDA kernels' device
// versions (kernels/common.cuh's floatToBF16Bits) give the same bits.
// Header-only, plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_BF16_H
#define MLT_SUPPORT_BF16_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mlt {

/// Rounds a float to bfloat16, nearest-even; NaN becomes 0x7FC0.
inline uint16_t floatToBF16(float value) {
  if (std::isnan(value))
    return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  // Adding 0x7FFF rounds up above the halfway point; the low bit of the kept
  // half breaks the tie toward an even result. Infinities stay infinities
  // because their low half is zero.
  uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

/// Widens a bfloat16 to the float with the same value (exact).
inline float bf16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

} // namespace mlt

#endif // MLT_SUPPORT_BF16_H
