// RUN: mlt-opt %s -split-input-file | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | mlt-opt -split-input-file | FileCheck %s
// RUN: mlt-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

// Tests that mlt.embedding_grad round-trips with i32 and i64 ids, writing its
// table type out.
// CHECK-LABEL: func.func @embedding_grad
// CHECK-SAME: (%[[IDS:[^ ,:]+]]: tensor<4x32xi32>, %[[IDS64:[^ ,:]+]]: tensor<2x3xi64>, %[[D:[^ ,:]+]]: tensor<4x32x64xf32>, %[[DBF:[^ ,:]+]]: tensor<2x3x8xbf16>)
func.func @embedding_grad(%ids: tensor<4x32xi32>, %ids64: tensor<2x3xi64>, %dout: tensor<4x32x64xf32>,
                          %dbf: tensor<2x3x8xbf16>) -> (tensor<256x64xf32>, tensor<16x8xbf16>) {
  // CHECK: %[[T:[^ ,:]+]] = mlt.embedding_grad %[[IDS]], %[[D]] : tensor<4x32xi32>, tensor<4x32x64xf32> -> tensor<256x64xf32>
  // CHECK: %[[T2:[^ ,:]+]] = mlt.embedding_grad %[[IDS64]], %[[DBF]] : tensor<2x3xi64>, tensor<2x3x8xbf16> -> tensor<16x8xbf16>
  // CHECK: return %[[T]], %[[T2]]
  // GENERIC-LABEL: sym_name = "embedding_grad"
  // GENERIC: "mlt.embedding_grad"(%{{.*}}, %{{.*}}) : (tensor<4x32xi32>, tensor<4x32x64xf32>) -> tensor<256x64xf32>
  // GENERIC: "mlt.embedding_grad"(%{{.*}}, %{{.*}}) : (tensor<2x3xi64>, tensor<2x3x8xbf16>) -> tensor<16x8xbf16>
  %t = mlt.embedding_grad %ids, %dout : tensor<4x32xi32>, tensor<4x32x64xf32> -> tensor<256x64xf32>
  %t2 = mlt.embedding_grad %ids64, %dbf : tensor<2x3xi64>, tensor<2x3x8xbf16> -> tensor<16x8xbf16>
  return %t, %t2 : tensor<256x64xf32>, tensor<16x8xbf16>
}

// -----

// Tests that mlt.rms_norm_grad round-trips its epsilon and infers the input
// and weight types for its two results.
// CHECK-LABEL: func.func @rms_norm_grad
// CHECK-SAME: (%[[DY:[^ ,:]+]]: tensor<4x32x64xf32>, %[[X:[^ ,:]+]]: tensor<4x32x64xf32>, %[[W:[^ ,:]+]]: tensor<64xf32>)
func.func @rms_norm_grad(%dy: tensor<4x32x64xf32>, %x: tensor<4x32x64xf32>, %w: tensor<64xf32>)
    -> (tensor<4x32x64xf32>, tensor<64xf32>) {
  // CHECK: %[[DX:[^ ,:]+]], %[[DW:[^ ,:]+]] = mlt.rms_norm_grad %[[DY]], %[[X]], %[[W]] eps = 1.000000e-05 : tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<64xf32>
  // CHECK: return %[[DX]], %[[DW]] : tensor<4x32x64xf32>, tensor<64xf32>
  // GENERIC-LABEL: sym_name = "rms_norm_grad"
  // GENERIC: "mlt.rms_norm_grad"(%{{.*}}, %{{.*}}, %{{.*}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<64xf32>) -> (tensor<4x32x64xf32>, tensor<64xf32>)
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05 : tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<64xf32>
  return %dx, %dw : tensor<4x32x64xf32>, tensor<64xf32>
}

// -----

// Tests that mlt.attention_grad round-trips with and without `causal`, with
// grouped-query heads: dq takes the query's type, dk and dv the key/value's.
// CHECK-LABEL: func.func @attention_grad
// CHECK-SAME: (%[[DO:[^ ,:]+]]: tensor<4x32x4x16xf32>, %[[Q:[^ ,:]+]]: tensor<4x32x4x16xf32>, %[[K:[^ ,:]+]]: tensor<4x32x2x16xf32>, %[[V:[^ ,:]+]]: tensor<4x32x2x16xf32>, %[[O:[^ ,:]+]]: tensor<4x32x4x16xf32>)
func.func @attention_grad(%dout: tensor<4x32x4x16xf32>, %q: tensor<4x32x4x16xf32>, %k: tensor<4x32x2x16xf32>,
                          %v: tensor<4x32x2x16xf32>, %out: tensor<4x32x4x16xf32>)
    -> (tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>) {
  // CHECK: %[[DQ:[^ ,:]+]], %[[DK:[^ ,:]+]], %[[DV:[^ ,:]+]] = mlt.attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]] causal scale = 2.500000e-01 : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
  // CHECK: %[[DQ2:[^ ,:]+]], %{{[^ ,:]+}}, %{{[^ ,:]+}} = mlt.attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]], %[[O]] scale = 1.250000e-01 :
  // CHECK: return %[[DQ]], %[[DK]], %[[DV]], %[[DQ2]]
  // GENERIC-LABEL: sym_name = "attention_grad"
  // GENERIC: "mlt.attention_grad"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{causal, scale = 2.500000e-01 : f64}> : (tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>) -> (tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>)
  // GENERIC: "mlt.attention_grad"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale = 1.250000e-01 : f64}>
  %dq, %dk, %dv = mlt.attention_grad %dout, %q, %k, %v, %out causal scale = 0.25
      : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
  %dq2, %dk2, %dv2 = mlt.attention_grad %dout, %q, %k, %v, %out scale = 0.125
      : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
  return %dq, %dk, %dv, %dq2 : tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
}

// -----

// Tests that mlt.swiglu_grad round-trips with one type for all its operands
// and both results.
// CHECK-LABEL: func.func @swiglu_grad
// CHECK-SAME: (%[[DY:[^ ,:]+]]: tensor<4x32x176xbf16>, %[[G:[^ ,:]+]]: tensor<4x32x176xbf16>, %[[U:[^ ,:]+]]: tensor<4x32x176xbf16>)
func.func @swiglu_grad(%dy: tensor<4x32x176xbf16>, %gate: tensor<4x32x176xbf16>, %up: tensor<4x32x176xbf16>)
    -> (tensor<4x32x176xbf16>, tensor<4x32x176xbf16>) {
  // CHECK: %[[DG:[^ ,:]+]], %[[DU:[^ ,:]+]] = mlt.swiglu_grad %[[DY]], %[[G]], %[[U]] : tensor<4x32x176xbf16>
  // CHECK: return %[[DG]], %[[DU]]
  // GENERIC-LABEL: sym_name = "swiglu_grad"
  // GENERIC: "mlt.swiglu_grad"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<4x32x176xbf16>, tensor<4x32x176xbf16>, tensor<4x32x176xbf16>) -> (tensor<4x32x176xbf16>, tensor<4x32x176xbf16>)
  %dgate, %dup = mlt.swiglu_grad %dy, %gate, %up : tensor<4x32x176xbf16>
  return %dgate, %dup : tensor<4x32x176xbf16>, tensor<4x32x176xbf16>
}

// -----

// Tests that mlt.silu_grad round-trips.
// CHECK-LABEL: func.func @silu_grad
// CHECK-SAME: (%[[DY:[^ ,:]+]]: tensor<4x32x176xf32>, %[[X:[^ ,:]+]]: tensor<4x32x176xf32>)
func.func @silu_grad(%dy: tensor<4x32x176xf32>, %x: tensor<4x32x176xf32>) -> tensor<4x32x176xf32> {
  // CHECK: %[[DX:[^ ,:]+]] = mlt.silu_grad %[[DY]], %[[X]] : tensor<4x32x176xf32>
  // CHECK: return %[[DX]]
  // GENERIC-LABEL: sym_name = "silu_grad"
  // GENERIC: "mlt.silu_grad"(%{{.*}}, %{{.*}}) : (tensor<4x32x176xf32>, tensor<4x32x176xf32>) -> tensor<4x32x176xf32>
  %dx = mlt.silu_grad %dy, %x : tensor<4x32x176xf32>
  return %dx : tensor<4x32x176xf32>
}

// -----

// Tests that mlt.cross_entropy_grad round-trips with a float32 loss gradient
// for float32 and bfloat16 logits and a float64 one for float64 logits, and
// infers the logits' type.
// CHECK-LABEL: func.func @cross_entropy_grad
// CHECK-SAME: (%[[G:[^ ,:]+]]: tensor<f32>, %[[G64:[^ ,:]+]]: tensor<f64>, %[[L:[^ ,:]+]]: tensor<4x32x256xf32>, %[[LBF:[^ ,:]+]]: tensor<4x32x256xbf16>, %[[L64:[^ ,:]+]]: tensor<4x32x256xf64>, %[[Y:[^ ,:]+]]: tensor<4x32xi32>)
func.func @cross_entropy_grad(%g: tensor<f32>, %g64: tensor<f64>, %l: tensor<4x32x256xf32>,
                              %lbf: tensor<4x32x256xbf16>, %l64: tensor<4x32x256xf64>, %y: tensor<4x32xi32>)
    -> (tensor<4x32x256xf32>, tensor<4x32x256xbf16>, tensor<4x32x256xf64>) {
  // CHECK: %[[D:[^ ,:]+]] = mlt.cross_entropy_grad %[[G]], %[[L]], %[[Y]] : tensor<f32>, tensor<4x32x256xf32>, tensor<4x32xi32>
  // CHECK: %[[DBF:[^ ,:]+]] = mlt.cross_entropy_grad %[[G]], %[[LBF]], %[[Y]] : tensor<f32>, tensor<4x32x256xbf16>, tensor<4x32xi32>
  // CHECK: %[[D64:[^ ,:]+]] = mlt.cross_entropy_grad %[[G64]], %[[L64]], %[[Y]] : tensor<f64>, tensor<4x32x256xf64>, tensor<4x32xi32>
  // CHECK: return %[[D]], %[[DBF]], %[[D64]]
  // GENERIC-LABEL: sym_name = "cross_entropy_grad"
  // GENERIC: "mlt.cross_entropy_grad"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<f32>, tensor<4x32x256xf32>, tensor<4x32xi32>) -> tensor<4x32x256xf32>
  // GENERIC: "mlt.cross_entropy_grad"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<f32>, tensor<4x32x256xbf16>, tensor<4x32xi32>) -> tensor<4x32x256xbf16>
  // GENERIC: "mlt.cross_entropy_grad"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<f64>, tensor<4x32x256xf64>, tensor<4x32xi32>) -> tensor<4x32x256xf64>
  %d = mlt.cross_entropy_grad %g, %l, %y : tensor<f32>, tensor<4x32x256xf32>, tensor<4x32xi32>
  %dbf = mlt.cross_entropy_grad %g, %lbf, %y : tensor<f32>, tensor<4x32x256xbf16>, tensor<4x32xi32>
  %d64 = mlt.cross_entropy_grad %g64, %l64, %y : tensor<f64>, tensor<4x32x256xf64>, tensor<4x32xi32>
  return %d, %dbf, %d64 : tensor<4x32x256xf32>, tensor<4x32x256xbf16>, tensor<4x32x256xf64>
}

//===----------------------------------------------------------------------===//
// Training state
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.accumulate_grad round-trips into a single parameter and
// into one layer of a per-layer family, by constant index and by a repeat's
// layer.
mlt.param @"model.norm.weight" : tensor<64xf32>
mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 2 : tensor<176x64xf32>
// CHECK-LABEL: func.func @accumulate_grad
// CHECK-SAME: (%[[DN:[^ ,:]+]]: tensor<64xf32>, %[[DW:[^ ,:]+]]: tensor<176x64xf32>)
func.func @accumulate_grad(%dn: tensor<64xf32>, %dw: tensor<176x64xf32>) {
  // CHECK: mlt.accumulate_grad @model.norm.weight, %[[DN]] : tensor<64xf32>
  // CHECK: %[[C1:[^ ,:]+]] = arith.constant 1 : index
  // CHECK: mlt.accumulate_grad @"model.layers.{}.mlp.up_proj.weight"[%[[C1]]], %[[DW]] : tensor<176x64xf32>
  // CHECK: mlt.repeat %[[L:[^ ,:]+]] = 0 to 2 {
  // CHECK-NEXT: mlt.accumulate_grad @"model.layers.{}.mlp.up_proj.weight"[%[[L]]], %[[DW]] : tensor<176x64xf32>
  // GENERIC-LABEL: sym_name = "accumulate_grad"
  // GENERIC: "mlt.accumulate_grad"(%{{.*}}) <{name = @model.norm.weight}> : (tensor<64xf32>) -> ()
  // GENERIC: "mlt.accumulate_grad"(%{{.*}}, %{{.*}}) <{name = @"model.layers.{}.mlp.up_proj.weight"}> : (index, tensor<176x64xf32>) -> ()
  mlt.accumulate_grad @"model.norm.weight", %dn : tensor<64xf32>
  %c1 = arith.constant 1 : index
  mlt.accumulate_grad @"model.layers.{}.mlp.up_proj.weight"[%c1], %dw : tensor<176x64xf32>
  mlt.repeat %layer = 0 to 2 {
    mlt.accumulate_grad @"model.layers.{}.mlp.up_proj.weight"[%layer], %dw : tensor<176x64xf32>
  }
  return
}

// -----

// Tests the state ops of a mixed-precision program: mlt.load reads the bf16
// compute copy of an f32 parameter, and its bf16 gradient accumulates into
// the f32 one.
mlt.param @"model.norm.weight" : tensor<64xf32>
// CHECK-LABEL: func.func @compute_copy
func.func @compute_copy(%dn: tensor<64xbf16>) -> tensor<64xbf16> {
  // CHECK: mlt.load @model.norm.weight : tensor<64xbf16>
  // CHECK: mlt.accumulate_grad @model.norm.weight, %{{[^ ,:]+}} : tensor<64xbf16>
  // GENERIC-LABEL: sym_name = "compute_copy"
  // GENERIC: "mlt.load"() <{name = @model.norm.weight}> : () -> tensor<64xbf16>
  %w = mlt.load @"model.norm.weight" : tensor<64xbf16>
  mlt.accumulate_grad @"model.norm.weight", %dn : tensor<64xbf16>
  return %w : tensor<64xbf16>
}

// -----

// Tests that mlt.load_grad round-trips for a single parameter and for one
// layer of a family.
mlt.param @"model.embed_tokens.weight" : tensor<256x64xbf16>
mlt.param @"model.layers.{}.input_layernorm.weight" layers 4 : tensor<64xf32>
// CHECK-LABEL: func.func @load_grad
func.func @load_grad() -> (tensor<256x64xbf16>, tensor<64xf32>) {
  // CHECK: %[[G:[^ ,:]+]] = mlt.load_grad @model.embed_tokens.weight : tensor<256x64xbf16>
  // CHECK: %[[C3:[^ ,:]+]] = arith.constant 3 : index
  // CHECK: %[[G3:[^ ,:]+]] = mlt.load_grad @"model.layers.{}.input_layernorm.weight"[%[[C3]]] : tensor<64xf32>
  // CHECK: return %[[G]], %[[G3]]
  // GENERIC-LABEL: sym_name = "load_grad"
  // GENERIC: "mlt.load_grad"() <{name = @model.embed_tokens.weight}> : () -> tensor<256x64xbf16>
  // GENERIC: "mlt.load_grad"(%{{.*}}) <{name = @"model.layers.{}.input_layernorm.weight"}> : (index) -> tensor<64xf32>
  %g = mlt.load_grad @"model.embed_tokens.weight" : tensor<256x64xbf16>
  %c3 = arith.constant 3 : index
  %g3 = mlt.load_grad @"model.layers.{}.input_layernorm.weight"[%c3] : tensor<64xf32>
  return %g, %g3 : tensor<256x64xbf16>, tensor<64xf32>
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// -----

// Tests that mlt.hyperparameter round-trips every name the runtime knows,
// each result named after its hyper-parameter.
// CHECK-LABEL: func.func @hyperparameters
func.func @hyperparameters() {
  // CHECK: %lr = mlt.hyperparameter "lr" : tensor<f32>
  // CHECK: %beta1 = mlt.hyperparameter "beta1" : tensor<f32>
  // CHECK: %beta2 = mlt.hyperparameter "beta2" : tensor<f32>
  // CHECK: %eps = mlt.hyperparameter "eps" : tensor<f32>
  // CHECK: %weight_decay = mlt.hyperparameter "weight_decay" : tensor<f32>
  // CHECK: %max_grad_norm = mlt.hyperparameter "max_grad_norm" : tensor<f32>
  // CHECK: %step = mlt.hyperparameter "step" : tensor<f32>
  // GENERIC-LABEL: sym_name = "hyperparameters"
  // GENERIC: "mlt.hyperparameter"() <{hyperparameter = "lr"}> : () -> tensor<f32>
  %lr = mlt.hyperparameter "lr" : tensor<f32>
  %b1 = mlt.hyperparameter "beta1" : tensor<f32>
  %b2 = mlt.hyperparameter "beta2" : tensor<f32>
  %eps = mlt.hyperparameter "eps" : tensor<f32>
  %wd = mlt.hyperparameter "weight_decay" : tensor<f32>
  %max = mlt.hyperparameter "max_grad_norm" : tensor<f32>
  %t = mlt.hyperparameter "step" : tensor<f32>
  return
}

// -----

// Tests that mlt.sum_squares, mlt.global_norm (of one and of several sums) and
// mlt.clip_coefficient round-trip.
// CHECK-LABEL: func.func @norms
// CHECK-SAME: (%[[A:[^ ,:]+]]: tensor<64x64xf32>, %[[B:[^ ,:]+]]: tensor<64xbf16>, %[[MAX:[^ ,:]+]]: tensor<f32>)
func.func @norms(%a: tensor<64x64xf32>, %b: tensor<64xbf16>, %max: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  // CHECK: %[[SA:[^ ,:]+]] = mlt.sum_squares %[[A]] : tensor<64x64xf32>
  // CHECK: %[[SB:[^ ,:]+]] = mlt.sum_squares %[[B]] : tensor<64xbf16>
  // CHECK: %[[N1:[^ ,:]+]] = mlt.global_norm %[[SA]] : tensor<f32>
  // CHECK: %[[N:[^ ,:]+]] = mlt.global_norm %[[SA]], %[[SB]] : tensor<f32>
  // CHECK: %[[C:[^ ,:]+]] = mlt.clip_coefficient %[[N]], %[[MAX]] : tensor<f32>
  // CHECK: return %[[N1]], %[[C]]
  // GENERIC-LABEL: sym_name = "norms"
  // GENERIC: "mlt.sum_squares"(%{{.*}}) : (tensor<64x64xf32>) -> tensor<f32>
  // GENERIC: "mlt.global_norm"(%{{.*}}, %{{.*}}) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  // GENERIC: "mlt.clip_coefficient"(%{{.*}}, %{{.*}}) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %sa = mlt.sum_squares %a : tensor<64x64xf32>
  %sb = mlt.sum_squares %b : tensor<64xbf16>
  %n1 = mlt.global_norm %sa : tensor<f32>
  %n = mlt.global_norm %sa, %sb : tensor<f32>
  %c = mlt.clip_coefficient %n, %max : tensor<f32>
  return %n1, %c : tensor<f32>, tensor<f32>
}

// -----

// Tests that mlt.adamw round-trips with `decay` on a layer of a family and
// without it on a single parameter.
mlt.param @"model.norm.weight" : tensor<64xf32>
mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 2 : tensor<176x64xf32>
// CHECK-LABEL: func.func @adamw
// CHECK-SAME: (%[[GW:[^ ,:]+]]: tensor<176x64xf32>, %[[GN:[^ ,:]+]]: tensor<64xf32>, %[[S:[^ ,:]+]]: tensor<f32>)
func.func @adamw(%gw: tensor<176x64xf32>, %gn: tensor<64xf32>, %scale: tensor<f32>) {
  // CHECK: %[[LR:[^ ,:]+]] = mlt.hyperparameter "lr"
  // CHECK: %[[B1:[^ ,:]+]] = mlt.hyperparameter "beta1"
  // CHECK: %[[B2:[^ ,:]+]] = mlt.hyperparameter "beta2"
  // CHECK: %[[EPS:[^ ,:]+]] = mlt.hyperparameter "eps"
  // CHECK: %[[WD:[^ ,:]+]] = mlt.hyperparameter "weight_decay"
  // CHECK: %[[T:[^ ,:]+]] = mlt.hyperparameter "step"
  // CHECK: %[[C0:[^ ,:]+]] = arith.constant 0 : index
  // CHECK: mlt.adamw @"model.layers.{}.mlp.up_proj.weight"[%[[C0]]] grad %[[GW]] scale %[[S]] lr %[[LR]] betas %[[B1]], %[[B2]] eps %[[EPS]] weight_decay %[[WD]] step %[[T]] decay : tensor<176x64xf32>
  // CHECK: mlt.adamw @model.norm.weight grad %[[GN]] scale %[[S]] lr %[[LR]] betas %[[B1]], %[[B2]] eps %[[EPS]] weight_decay %[[WD]] step %[[T]] : tensor<64xf32>
  // GENERIC-LABEL: sym_name = "adamw"
  // GENERIC: "mlt.adamw"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{decay, name = @"model.layers.{}.mlp.up_proj.weight"}> : (index, tensor<176x64xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
  // GENERIC: "mlt.adamw"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{name = @model.norm.weight}> : (tensor<64xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> ()
  %lr = mlt.hyperparameter "lr" : tensor<f32>
  %b1 = mlt.hyperparameter "beta1" : tensor<f32>
  %b2 = mlt.hyperparameter "beta2" : tensor<f32>
  %eps = mlt.hyperparameter "eps" : tensor<f32>
  %wd = mlt.hyperparameter "weight_decay" : tensor<f32>
  %t = mlt.hyperparameter "step" : tensor<f32>
  %c0 = arith.constant 0 : index
  mlt.adamw @"model.layers.{}.mlp.up_proj.weight"[%c0] grad %gw scale %scale lr %lr betas %b1, %b2
      eps %eps weight_decay %wd step %t decay : tensor<176x64xf32>
  mlt.adamw @"model.norm.weight" grad %gn scale %scale lr %lr betas %b1, %b2
      eps %eps weight_decay %wd step %t : tensor<64xf32>
  return
}

// -----

// Tests that the `mlt.microbatches` attribute round-trips on a function.
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: attributes {mlt.microbatches = 8 : i64}
// GENERIC-LABEL: sym_name = "micro_step"
// GENERIC: }) {mlt.microbatches = 8 : i64} : () -> ()
func.func @micro_step() attributes {mlt.microbatches = 8 : i64} {
  return
}

// -----

// Tests that the `mlt.recomputed` marker of mlt-recompute-activations
// round-trips on a forward op.
// CHECK-LABEL: func.func @recomputed
// CHECK: mlt.swiglu %{{.*}}, %{{.*}} {mlt.recomputed} : tensor<4xf32>
// GENERIC-LABEL: sym_name = "recomputed"
// GENERIC: "mlt.swiglu"(%{{.*}}, %{{.*}}) {mlt.recomputed} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
func.func @recomputed(%g: tensor<4xf32>, %u: tensor<4xf32>) -> tensor<4xf32> {
  %s = mlt.swiglu %g, %u {mlt.recomputed} : tensor<4xf32>
  return %s : tensor<4xf32>
}
