// RUN: mlt-opt %s -split-input-file -mlt-plan-memory | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlt-plan-memory="in-place=false" | FileCheck %s --check-prefix=OFF

// Tests that cross_entropy_bwd writes the logits' gradient over the logits,
// which die there (Kernels.def: in place, dlogits over logits): the two
// take one range and the arena shrinks by one of them; without in-place
// they need two.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 2048 : i64}
// CHECK: mlt_rt.buffer @logits temporary offset 1792 : tensor<4x16xf32>
// CHECK-NEXT: mlt_rt.buffer @dlogits temporary offset 1792 : tensor<4x16xf32>
// OFF-LABEL: module attributes {mlt_rt.arena_bytes = 2304 : i64}
// OFF: mlt_rt.buffer @logits temporary offset 1792 : tensor<4x16xf32>
// OFF-NEXT: mlt_rt.buffer @dlogits temporary offset 2048 : tensor<4x16xf32>
mlt_rt.buffer @x input : tensor<4x8xf32>
mlt_rt.buffer @w input : tensor<16x8xf32>
mlt_rt.buffer @labels input : tensor<4xi32>
mlt_rt.buffer @dloss input : tensor<f32>
mlt_rt.buffer @loss output : tensor<f32>
mlt_rt.buffer @dx output : tensor<4x8xf32>
mlt_rt.buffer @logits temporary : tensor<4x16xf32>
mlt_rt.buffer @dlogits temporary : tensor<4x16xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "matmul" [@x, @w] -> [@logits] ints [1, 4, 16, 8, 0, 1, 0]
  mlt_rt.launch "cross_entropy_fwd" [@logits, @labels] -> [@loss] ints [4, 16]
  mlt_rt.launch "cross_entropy_bwd" [@dloss, @logits, @labels] -> [@dlogits] ints [4, 16]
  mlt_rt.launch "matmul" [@dlogits, @w] -> [@dx] ints [1, 4, 8, 16, 0, 0, 0]
}

// -----

// Tests that maps chain: each silu writes over its input, which dies there,
// so @t0, @t1 and @t2 share one range; that a matmul never writes over its
// operands (@t3 after @t2's chain); and that matmul_add does not write over
// its addend (@t2), which the kernel allows but cuBLASLt rounds differently
// (KernelInfo.h's placesInPlace), so @t4 has a range of its own.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1280 : i64}
// CHECK-NEXT: mlt_rt.buffer @x input offset 0 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @w input offset 256 : tensor<1x1xf32>
// CHECK-NEXT: mlt_rt.buffer @t0 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t1 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t2 temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t3 temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @t4 temporary offset 1024 : tensor<64xf32>
// OFF-LABEL: module attributes {mlt_rt.arena_bytes = 1280 : i64}
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @w input : tensor<1x1xf32>
mlt_rt.buffer @t0 temporary : tensor<64xf32>
mlt_rt.buffer @t1 temporary : tensor<64xf32>
mlt_rt.buffer @t2 temporary : tensor<64xf32>
mlt_rt.buffer @t3 temporary : tensor<64xf32>
mlt_rt.buffer @t4 temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@t0] ints [64]
  mlt_rt.launch "silu_fwd" [@t0] -> [@t1] ints [64]
  mlt_rt.launch "silu_fwd" [@t1] -> [@t2] ints [64]
  mlt_rt.launch "matmul" [@t2, @w] -> [@t3] ints [1, 64, 1, 1, 0, 0, 0]
  mlt_rt.launch "matmul_add" [@t3, @w, @t2] -> [@t4] ints [1, 64, 1, 1, 0, 0, 0]
  mlt_rt.launch "add" [@t4, @t4] -> [@x] ints [64]
}

// -----

// Tests that an output goes over an input only where everything allows it:
// not over an input read later (@s beside @live), nor over one the kernel
// may not overwrite (@p, a matmul's operand; @h, a cast's), nor over one it
// reads at a position where it may not (@c: matmul_add's @b is its left
// operand as well as its addend), nor over one of another element type (@sum: f32,
// @h bf16); but over one of another shape (@b, a silu's output, over @p),
// and over the first candidate of several (@a over @s, not @live).
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK-NEXT: mlt_rt.buffer @x input offset 0 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @w input offset 256 : tensor<1x1xf32>
// CHECK-NEXT: mlt_rt.buffer @live temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @s temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @a temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @p temporary offset 512 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @b temporary offset 512 : tensor<64x1xf32>
// CHECK-NEXT: mlt_rt.buffer @c temporary offset 768 : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @h temporary offset 512 : tensor<128xbf16>
// CHECK-NEXT: mlt_rt.buffer @sum temporary offset 768 : tensor<64xf32>
// OFF-LABEL: module attributes {mlt_rt.arena_bytes = 1280 : i64}
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @w input : tensor<1x1xf32>
mlt_rt.buffer @live temporary : tensor<64xf32>
mlt_rt.buffer @s temporary : tensor<64xf32>
mlt_rt.buffer @a temporary : tensor<64xf32>
mlt_rt.buffer @p temporary : tensor<64xf32>
mlt_rt.buffer @b temporary : tensor<64x1xf32>
mlt_rt.buffer @c temporary : tensor<64xf32>
mlt_rt.buffer @h temporary : tensor<128xbf16>
mlt_rt.buffer @sum temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@live] ints [64]
  mlt_rt.launch "silu_fwd" [@live] -> [@s] ints [64]
  mlt_rt.launch "mul" [@s, @live] -> [@a] ints [64]
  mlt_rt.launch "matmul" [@a, @w] -> [@p] ints [1, 64, 1, 1, 0, 0, 0]
  mlt_rt.launch "silu_fwd" [@p] -> [@b] ints [64]
  mlt_rt.launch "matmul_add" [@b, @w, @b] -> [@c] ints [1, 64, 1, 1, 0, 0, 0]
  mlt_rt.launch "cast" [@c] -> [@h] ints [128]
  mlt_rt.launch "add" [@h, @h] -> [@sum] ints [64]
  mlt_rt.launch "add" [@sum, @sum] -> [@x] ints [64]
}

// -----

// Tests that a kernel with two outputs places each over its own dying
// input, in order: swiglu_bwd's dgate over dy (its first candidate) and
// dup over gate (dy being taken), and up stays where it is.
// CHECK-LABEL: module attributes {mlt_rt.arena_bytes = 1024 : i64}
// CHECK: mlt_rt.buffer @dy temporary offset [[DY:[0-9]+]] : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @gate temporary offset [[GATE:[0-9]+]] : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @up temporary offset [[UP:[0-9]+]] : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @dgate temporary offset [[DY]] : tensor<64xf32>
// CHECK-NEXT: mlt_rt.buffer @dup temporary offset [[GATE]] : tensor<64xf32>
// OFF-LABEL: module attributes {mlt_rt.arena_bytes = 1536 : i64}
mlt_rt.buffer @x input : tensor<64xf32>
mlt_rt.buffer @dy temporary : tensor<64xf32>
mlt_rt.buffer @gate temporary : tensor<64xf32>
mlt_rt.buffer @up temporary : tensor<64xf32>
mlt_rt.buffer @dgate temporary : tensor<64xf32>
mlt_rt.buffer @dup temporary : tensor<64xf32>
mlt_rt.program @micro_step {
  mlt_rt.launch "silu_fwd" [@x] -> [@dy] ints [64]
  mlt_rt.launch "silu_fwd" [@x] -> [@gate] ints [64]
  mlt_rt.launch "silu_fwd" [@x] -> [@up] ints [64]
  mlt_rt.launch "swiglu_bwd" [@dy, @gate, @up] -> [@dgate, @dup] ints [64]
  mlt_rt.launch "add" [@dgate, @dup] -> [@x] ints [64]
}
