//===- ElementType.h - element types of runtime buffers ---------*- C++ -*-===//
//
// Part of mlt. The element types a plan's buffers hold, with their names and
// sizes. A header of its own, with no dependencies, so that every runtime
// library (plans, collectives, backends) speaks of types the same way without
// linking another.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_ELEMENTTYPE_H
#define MLT_RUNTIME_ELEMENTTYPE_H

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
  I64 = 5
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
  }
  return 0;
}

/// True for F32, F64, BF16 and F16.
inline bool isFloatElementType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::BF16 || type == ElementType::F16;
}

} // namespace mlt::rt

#endif // MLT_RUNTIME_ELEMENTTYPE_H
