// RUN: mlt-opt %s -split-input-file -verify-diagnostics -mlt-partition-optimizer="zero=1"
// RUN: not mlt-opt %s -mlt-partition-optimizer="zero=3" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not mlt-opt %s -mlt-partition-optimizer="zero=1 bucket-bytes=-1" 2>&1 | FileCheck %s --check-prefix=BYTES
// RUN: not mlt-opt %s -mlt-partition-optimizer="zero=2 grad-reduce-dtype=f16" 2>&1 | FileCheck %s --check-prefix=REDUCE-TYPE
// RUN: not mlt-opt %s -mlt-partition-optimizer="zero=1 grad-reduce-dtype=bf16" 2>&1 | FileCheck %s --check-prefix=REDUCE-STAGE

// STAGE: mlt-partition-optimizer: zero must be 0, 1 or 2, got 3
// BYTES: mlt-partition-optimizer: bucket-bytes must be non-negative, got -1
// REDUCE-TYPE: mlt-partition-optimizer: grad-reduce-dtype must be f32 or bf16, got 'f16'
// REDUCE-STAGE: mlt-partition-optimizer: grad-reduce-dtype=bf16 reduces each micro-batch's gradients, which zero=2 does; got zero=1

// Tests that a module without data-parallel ranks is refused.
// expected-error @+1 {{mlt-partition-optimizer: zero=1 partitions the optimizer over the ranks that hold the same parameters, but the module has no mesh axis 'dp' or 'cp' of size 2 or more}}
module attributes {mlt.mesh = #mlt.mesh<tp = 2>} {
  mlt_rt.program @optimizer_step {
  }
}

// -----

// Tests that a module partitioned already is refused.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt_rt.buffer @grad_bucket.0 gradient {bucket} : tensor<256xf32>
  // expected-error @+1 {{is a view or a slice already: the optimizer is partitioned}}
  mlt_rt.buffer @grad_shard.0 gradient {owns, shard = "dp", view = @grad_bucket.0} : tensor<128xf32>
  mlt_rt.program @optimizer_step {
  }
}

// -----

// Tests that an optimizer step with a kernel the pass does not know is
// refused rather than dropped.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
  mlt_rt.buffer @t temporary : tensor<16xf32>
  mlt_rt.program @optimizer_step {
    // expected-error @+1 {{mlt-partition-optimizer: @optimizer_step launches a kernel it does not know how to partition}}
    mlt_rt.launch "silu_fwd" [@"grad:a"] -> [@t] ints [16]
  }
}

// -----

// Tests that an optimizer step without AdamW is refused.
module attributes {mlt.mesh = #mlt.mesh<dp = 2>} {
  mlt_rt.buffer @"grad:a" gradient {parameter = "a"} : tensor<16xf32>
  // expected-error @+1 {{has no adamw launches, gradient norm or clipping to partition}}
  mlt_rt.program @optimizer_step {
    mlt_rt.launch "all_reduce_sum" [@"grad:a"] -> [@"grad:a"] ints [16, 0]
  }
}
