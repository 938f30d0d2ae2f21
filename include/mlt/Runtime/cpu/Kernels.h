//===- Kernels.h - the CPU backend's kernel library -------------*- C++ -*-===//
//
// Part of mlt. Includes every kernel family of the CPU backend: the forward
// and backward of each op of the training program, the optimizer step and the
// buffer utilities. Each family has its own header, mirroring the CUDA
// backend's lib/Runtime/cuda/kernels/<family>.cuh, and states its invariants
// (layouts, what is overwritten and what accumulated, what is saved for the
// backward) there. All kernels are plain single-threaded functions templated
// on the element type, instantiated for float (training) and double (gradient
// checks).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_KERNELS_H
#define MLT_RUNTIME_CPU_KERNELS_H

#include "mlt/Runtime/cpu/AdamW.h"
#include "mlt/Runtime/cpu/Attention.h"
#include "mlt/Runtime/cpu/CrossEntropy.h"
#include "mlt/Runtime/cpu/Elementwise.h"
#include "mlt/Runtime/cpu/Embedding.h"
#include "mlt/Runtime/cpu/Fp8.h"
#include "mlt/Runtime/cpu/Gemm.h"
#include "mlt/Runtime/cpu/RMSNorm.h"
#include "mlt/Runtime/cpu/Rope.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#endif // MLT_RUNTIME_CPU_KERNELS_H
