// RUN: mlt-opt %s -split-input-file -mlt-attach-optimizer | FileCheck %s

// Tests that the optimizer step reads every hyper-parameter once, has one
// load_grad and sum_squares per parameter tensor (per layer for a family, in
// declaration order), the global norm over all of them, the clipping
// coefficient from max_grad_norm, one adamw per tensor (with `decay` on
// matrices, embeddings included, not on vectors), and returns the norm.
module {
  mlt.param @"model.embed_tokens.weight" : tensor<16x8xf32>
  mlt.param @"model.layers.{}.input_layernorm.weight" layers 2 : tensor<8xf32>
  mlt.param @"model.layers.{}.mlp.up_proj.weight" layers 2 : tensor<12x8xbf16>
  mlt.param @"model.norm.weight" : tensor<8xf32>
  // CHECK-LABEL: func.func @optimizer_step() -> tensor<f32>
  // CHECK: %[[LR:[^ ,:]+]] = mlt.hyperparameter "lr" : tensor<f32>
  // CHECK: %[[B1:[^ ,:]+]] = mlt.hyperparameter "beta1" : tensor<f32>
  // CHECK: %[[B2:[^ ,:]+]] = mlt.hyperparameter "beta2" : tensor<f32>
  // CHECK: %[[EPS:[^ ,:]+]] = mlt.hyperparameter "eps" : tensor<f32>
  // CHECK: %[[WD:[^ ,:]+]] = mlt.hyperparameter "weight_decay" : tensor<f32>
  // CHECK: %[[MAX:[^ ,:]+]] = mlt.hyperparameter "max_grad_norm" : tensor<f32>
  // CHECK: %[[STEP:[^ ,:]+]] = mlt.hyperparameter "step" : tensor<f32>
  // CHECK: %[[GE:[^ ,:]+]] = mlt.load_grad @model.embed_tokens.weight : tensor<16x8xf32>
  // CHECK: %[[SE:[^ ,:]+]] = mlt.sum_squares %[[GE]] : tensor<16x8xf32>
  // CHECK: %[[C0:[^ ,:]+]] = arith.constant 0 : index
  // CHECK: %[[GI0:[^ ,:]+]] = mlt.load_grad @"model.layers.{}.input_layernorm.weight"[%[[C0]]] : tensor<8xf32>
  // CHECK: %[[SI0:[^ ,:]+]] = mlt.sum_squares %[[GI0]] : tensor<8xf32>
  // CHECK: %[[C1:[^ ,:]+]] = arith.constant 1 : index
  // CHECK: %[[GI1:[^ ,:]+]] = mlt.load_grad @"model.layers.{}.input_layernorm.weight"[%[[C1]]] : tensor<8xf32>
  // CHECK: %[[SI1:[^ ,:]+]] = mlt.sum_squares %[[GI1]] : tensor<8xf32>
  // CHECK: %[[C0B:[^ ,:]+]] = arith.constant 0 : index
  // CHECK: %[[GU0:[^ ,:]+]] = mlt.load_grad @"model.layers.{}.mlp.up_proj.weight"[%[[C0B]]] : tensor<12x8xbf16>
  // CHECK: %[[SU0:[^ ,:]+]] = mlt.sum_squares %[[GU0]] : tensor<12x8xbf16>
  // CHECK: %[[C1B:[^ ,:]+]] = arith.constant 1 : index
  // CHECK: %[[GU1:[^ ,:]+]] = mlt.load_grad @"model.layers.{}.mlp.up_proj.weight"[%[[C1B]]] : tensor<12x8xbf16>
  // CHECK: %[[SU1:[^ ,:]+]] = mlt.sum_squares %[[GU1]] : tensor<12x8xbf16>
  // CHECK: %[[GN:[^ ,:]+]] = mlt.load_grad @model.norm.weight : tensor<8xf32>
  // CHECK: %[[SN:[^ ,:]+]] = mlt.sum_squares %[[GN]] : tensor<8xf32>
  // CHECK: %[[NORM:[^ ,:]+]] = mlt.global_norm %[[SE]], %[[SI0]], %[[SI1]], %[[SU0]], %[[SU1]], %[[SN]] : tensor<f32>
  // CHECK: %[[COEF:[^ ,:]+]] = mlt.clip_coefficient %[[NORM]], %[[MAX]] : tensor<f32>
  // CHECK: mlt.adamw @model.embed_tokens.weight grad %[[GE]] scale %[[COEF]] lr %[[LR]] betas %[[B1]], %[[B2]] eps %[[EPS]] weight_decay %[[WD]] step %[[STEP]] decay : tensor<16x8xf32>
  // CHECK: mlt.adamw @"model.layers.{}.input_layernorm.weight"[%[[C0]]] grad %[[GI0]] scale %[[COEF]] lr %[[LR]] betas %[[B1]], %[[B2]] eps %[[EPS]] weight_decay %[[WD]] step %[[STEP]] : tensor<8xf32>
  // CHECK: mlt.adamw @"model.layers.{}.input_layernorm.weight"[%[[C1]]] grad %[[GI1]] scale %[[COEF]] {{.*}} step %[[STEP]] : tensor<8xf32>
  // CHECK: mlt.adamw @"model.layers.{}.mlp.up_proj.weight"[%[[C0B]]] grad %[[GU0]] scale %[[COEF]] {{.*}} step %[[STEP]] decay : tensor<12x8xbf16>
  // CHECK: mlt.adamw @"model.layers.{}.mlp.up_proj.weight"[%[[C1B]]] grad %[[GU1]] scale %[[COEF]] {{.*}} step %[[STEP]] decay : tensor<12x8xbf16>
  // CHECK: mlt.adamw @model.norm.weight grad %[[GN]] scale %[[COEF]] {{.*}} step %[[STEP]] : tensor<8xf32>
  // CHECK-NEXT: return %[[NORM]] : tensor<f32>
}

// -----

// Tests that the pass adds @optimizer_step beside the module's other
// functions and leaves them alone, with exactly one adamw for one parameter.
module {
  mlt.param @"lm_head.weight" : tensor<16x8xf32>
  // CHECK-LABEL: func.func @micro_step
  // CHECK-NOT: mlt.adamw
  // CHECK: return
  // CHECK-LABEL: func.func @optimizer_step
  // CHECK: %[[G:[^ ,:]+]] = mlt.load_grad @lm_head.weight : tensor<16x8xf32>
  // CHECK: %[[S:[^ ,:]+]] = mlt.sum_squares %[[G]]
  // CHECK: %[[NORM:[^ ,:]+]] = mlt.global_norm %[[S]] : tensor<f32>
  // CHECK: mlt.adamw @lm_head.weight grad %[[G]] {{.*}} decay : tensor<16x8xf32>
  // CHECK-NOT: mlt.adamw
  // CHECK: return %[[NORM]]
  func.func @micro_step() {
    return
  }
}
