//===- position.h - the device's place, written by the device ---*- C++ -*-===//
//
// Part of mlt. The position family: one kernel, queued around every
// collective and transfer group when the hang watchdog watches a rank
// (Position.h's device words), that writes one 64-bit word into host-mapped
// memory, where the host's watchdog thread reads it while the device runs.
//
// Invariants:
// - One thread of one block writes one word, volatile, then fences for the
//   system, so that the host sees the word once the kernel has run, and
//   in stream order with the launches around it.
// - The word is an argument of the launch: a captured graph replays the
//   same words, which name places of the step, not of a step number.
// - Beside the word it keeps its stream's clock (two more words of the
//   same mapped memory, read and written by this kernel alone, one launch
//   at a time in stream order): the time spent inside collectives.
// - It reads nothing else and touches no other memory: queued on a stream, it
//   orders nothing beyond that stream's own order, and it costs the device
//   one tiny kernel (about 2 us per collective, under a CUDA graph less).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_POSITION_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_POSITION_H

#include "mlt/Support/Status.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace mlt::cuda {

/// Queues the write of `value` into `word` (host-mapped memory, by its
/// device address) on `stream`; with `clock` (the stream's two clock words,
/// Position.h), first the device's time (%globaltimer, nanoseconds) into
/// clock[0] on entering a collective, or on `leaving` it the time since
/// then added to clock[1].
Status launchWritePosition(volatile uint64_t *word, uint64_t value,
                           volatile uint64_t *clock, bool leaving,
                           cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_POSITION_H
