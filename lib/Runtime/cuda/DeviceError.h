//===- DeviceError.h - data errors found by CUDA kernels --------*- C++ -*-===//
//
// Part of mlt. A kernel cannot return a Status, and the host must not wait
// for every kernel to learn whether its data was valid. Kernels that check
// their data (token ids against the vocabulary, the AdamW step number)
// therefore report a failure into a small record in device memory, owned by
// the rank's device context, and skip the bad element (never reading or
// writing out of bounds); the context reads the record at its next
// synchronize and turns it into one line naming the kernel, the position
// and the value, as the CPU kernels' own messages do.
//
// Invariants:
// - The first launch to report owns the record (its tag is compared and
//   swapped in); later launches' reports are dropped until the context has
//   read and cleared it, so the message describes one launch.
// - Within the owning launch, the report with the smallest position wins
//   (an atomicMax of the complement of position << 32 | value), so the
//   message names the first bad element whatever the threads' order.
// - A zeroed record (cudaMemset 0) is empty.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_DEVICEERROR_H
#define MLT_LIB_RUNTIME_CUDA_DEVICEERROR_H

#include <cstdint>

namespace mlt::cuda {

/// What a kernel found wrong.
enum DeviceErrorCode : unsigned int {
  kDeviceErrorNone = 0,
  /// `value` (an int32 token id) at `position` is outside [0, limit).
  kDeviceErrorIdOutOfRange = 1,
  /// `value` (the bits of an f32 step number) is not a step number >= 1.
  kDeviceErrorInvalidStep = 2,
};

/// The record in device memory.
struct DeviceErrorRecord {
  /// The tag of the launch that reported first; 0: no report.
  unsigned int owner;
  unsigned int code;
  /// The complement of (position << 32 | uint32 value) of the first bad
  /// element; 0 before any report.
  unsigned long long where;
  long long limit;
};

/// Where one launch reports: the context's record (null: do not report)
/// and a tag, nonzero and distinct among the launches queued since the
/// context last read the record.
struct DeviceErrorSink {
  DeviceErrorRecord *record = nullptr;
  unsigned int tag = 0;
};

#ifdef __CUDACC__
/// Reports that element `position` holds `value`, which breaks `limit`.
__device__ inline void reportDeviceError(DeviceErrorSink sink,
                                         DeviceErrorCode code, int64_t position,
                                         uint32_t value, int64_t limit) {
  if (!sink.record)
    return;
  const unsigned int owner = atomicCAS(&sink.record->owner, 0u, sink.tag);
  if (owner != 0u && owner != sink.tag)
    return;
  // The same code and limit for every thread of the launch.
  sink.record->code = code;
  sink.record->limit = limit;
  const unsigned long long packed =
      (static_cast<unsigned long long>(position) << 32) | value;
  atomicMax(&sink.record->where, ~packed);
}
#endif

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_DEVICEERROR_H
