// Tests that Llama 3.1's rotary scaling (rope_type "llama3") imports: from a
// transformers 4 config.json (top-level rope_theta, `rope_scaling`, as
// Llama-3.1-8B's) and from a transformers 5 one (`rope_parameters`, tied
// embeddings, as Llama-3.2-1B's), the scaling in the model configuration and
// on the rotation of the queries and of the keys; that it round-trips
// through mlt-opt; that the inverse rotations of the backward pass (both
// layers unrolled) carry it too; that the rope kernels of the lowered plan
// get it as attributes; and that the config.json --save-hf writes imports to
// the same module (the scaling written back as rope_scaling).

// RUN: mlt-translate --import-hf-llama %S/Inputs/llama3.json | FileCheck %s --check-prefix=V4
// RUN: mlt-translate --import-hf-llama %S/Inputs/llama3.json | mlt-opt | FileCheck %s --check-prefix=V4
// RUN: mlt-translate --import-hf-llama %S/Inputs/llama3-v5.json | FileCheck %s --check-prefix=V5
// RUN: mlt-translate --import-hf-llama %S/Inputs/llama3-v5.json | mlt-opt -mlt-specialize-shapes="batch=2 seq-len=8" -mlt-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: mlt-run %S/Inputs/llama3-v5.json --batch 2 --seq-len 8 --emit-plan %t.mltplan > /dev/null
// RUN: mlt-run %t.mltplan --print-plan | FileCheck %s --check-prefix=PLAN
// RUN: rm -rf %t.hf && mlt-run %t.mltplan --steps 1 --save-hf %t.hf > /dev/null
// RUN: FileCheck %s --check-prefix=SAVED < %t.hf/config.json
// RUN: mlt-translate --import-hf-llama %t.hf/config.json > %t.saved.mlir
// RUN: mlt-translate --import-hf-llama %S/Inputs/llama3-v5.json | diff %t.saved.mlir -

// V4: module attributes {mlt.model = #mlt.llama<vocab_size = 256, {{.*}}, max_position_embeddings = 131072, rms_norm_eps = 1.000000e-05 : f64, rope_theta = 5.000000e+05 : f64, tie_word_embeddings = false, rope_scaling = <factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192>>}
// V4: mlt.param @lm_head.weight
// V4: %[[Q:[[:alnum:]_]+]] = mlt.reshape %{{.+}} : tensor<?x?x64xf32> -> tensor<?x?x4x16xf32>
// V4-NEXT: mlt.rope %[[Q]] theta = 5.000000e+05 scaling = <factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> : tensor<?x?x4x16xf32>
// V4-NEXT: %[[K:[[:alnum:]_]+]] = mlt.reshape %{{.+}} : tensor<?x?x32xf32> -> tensor<?x?x2x16xf32>
// V4-NEXT: mlt.rope %[[K]] theta = 5.000000e+05 scaling = <factor = 8.000000e+00 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> : tensor<?x?x2x16xf32>

// V5: module attributes {mlt.model = #mlt.llama<{{.*}} rope_theta = 5.000000e+05 : f64, tie_word_embeddings = true, rope_scaling = <factor = 3.200000e+01 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192>>}
// V5-NOT: lm_head
// V5-COUNT-2: mlt.rope %{{.+}} theta = 5.000000e+05 scaling = <factor = 3.200000e+01 : f64, low_freq_factor = 1.000000e+00 : f64, high_freq_factor = 4.000000e+00 : f64, original_max_position_embeddings = 8192> :
// V5-NOT: mlt.rope

// GRAD-LABEL: func.func @micro_step
// GRAD-COUNT-4: mlt.rope %{{.+}} theta = 5.000000e+05 scaling = <factor = 3.200000e+01 : f64, {{.*}}> {mlt.layer = {{[01]}} : i64} : tensor<2x8x
// GRAD-COUNT-4: mlt.rope %{{.+}} theta = 5.000000e+05 scaling = <factor = 3.200000e+01 : f64, {{.*}}> inverse : tensor<2x8x
// GRAD-NOT: mlt.rope

// Forward and inverse (ints: ..., inverse, position_offset, scaling 1 for
// llama3, original_max_position_embeddings, axis -1 for none; floats:
// theta, factor, low_freq_factor, high_freq_factor).
// PLAN: rope ({{.*}}) -> ({{.*}}) ints [2, 8, 4, 16, 0, 0, 1, 8192, -1] floats [500000, 32, 1, 4]
// PLAN: rope ({{.*}}) -> ({{.*}}) ints [2, 8, 2, 16, 0, 0, 1, 8192, -1] floats [500000, 32, 1, 4]
// PLAN: attention_bwd_rope ({{.*}}) -> ({{.*}}) ints [2, 8, 8, 4, 2, 16, 1, -1, 0, 0, 0, 1, 8192] floats [0.25, 500000, 32, 1, 4]

// SAVED:      "rope_scaling": {
// SAVED-NEXT:   "factor": 32,
// SAVED-NEXT:   "high_freq_factor": 4,
// SAVED-NEXT:   "low_freq_factor": 1,
// SAVED-NEXT:   "original_max_position_embeddings": 8192,
// SAVED-NEXT:   "rope_type": "llama3"
// SAVED-NEXT: },
// SAVED-NEXT: "rope_theta": 500000,
// SAVED-NEXT: "tie_word_embeddings": true,
