//===- ElementType.h - element types of runtime buffers ---------*- C++ -*-===//
//
// Part of mlt. The element types a plan's buffers hold, with their names and
// sizes. A header of its own, with no dependencies, so that every runtime
// library (plans, collectives, backends) speaks of types the same way without
// linking another.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_ELEMENTTYPE_H
#define MLT_PLAN_ELEMENTTYPE_H

#include <cstddef>
#include <cstdint>

namespace mlt::rt {

/// Element types of plan buffers; the values are Plan.fbs's `DType`.
enum class ElementType : uint8_t {
  F32 = 0,
  F64 = 1,
  BF16 = 2,
  F16 = 3,
  I32 = 4,
  I64 = 5,
  /// The two 8-bit float formats of FP8 products (OCP FP8: e4m3 without
  /// infinities, max 448; e5m2, max 57344), bytes of their bit patterns.
  F8E4M3 = 6,
  F8E5M2 = 7
};

/// "f32", "f64", "bf16", "f16", "i32", "i64".
inline const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F64:
    return "f64";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F16:
    return "f16";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  case ElementType::F8E4M3:
    return "f8e4m3";
  case ElementType::F8E5M2:
    return "f8e5m2";
  }
  return "?";
}

/// Bytes per element.
inline size_t elementSize(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F64:
  case ElementType::I64:
    return 8;
  case ElementType::BF16:
  case ElementType::F16:
    return 2;
  case ElementType::F8E4M3:
  case ElementType::F8E5M2:
    return 1;
  }
  return 0;
}

/// True for F32, F64, BF16 and F16: the types kernels compute in (FP8
/// values are only ever operands of scaled products, isFp8ElementType).
inline bool isFloatElementType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::BF16 || type == ElementType::F16;
}

/// True for F8E4M3 and F8E5M2.
inline bool isFp8ElementType(ElementType type) {
  return type == ElementType::F8E4M3 || type == ElementType::F8E5M2;
}

} // namespace mlt::rt

#endif // MLT_PLAN_ELEMENTTYPE_H
