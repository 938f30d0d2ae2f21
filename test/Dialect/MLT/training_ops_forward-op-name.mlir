// RUN: mlt-opt %s -split-input-file -verify-diagnostics

// Tests that a shape error of rms_norm_grad names rms_norm_grad.
func.func @rms_norm_grad(%dy: tensor<4x64xf32>, %x: tensor<4x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'mlt.rms_norm_grad' op weight has 32 elements but the normalized (last) dimension of input has 64}}
  %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05 : tensor<4x64xf32>, tensor<4x64xf32>, tensor<32xf32>
  return
}

// -----

// Tests that a shape error of attention_grad names attention_grad.
func.func @attention_grad(%q: tensor<4x32x3x16xf32>, %k: tensor<4x32x2x16xf32>) {
  // expected-error @+1 {{'mlt.attention_grad' op query heads (3) must be a multiple of key/value heads (2) for grouped-query attention}}
  %dq, %dk, %dv = mlt.attention_grad %q, %q, %k, %k, %q causal scale = 0.25
      : tensor<4x32x3x16xf32>, tensor<4x32x3x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x2x16xf32>, tensor<4x32x3x16xf32>
  return
}

// -----

// Tests that a shape error of cross_entropy_grad names cross_entropy_grad.
func.func @cross_entropy_grad(%g: tensor<f32>, %l: tensor<4x32x256xf32>, %y: tensor<4x16xi32>) {
  // expected-error @+1 {{'mlt.cross_entropy_grad' op labels and logits differ in dimension 1}}
  %d = mlt.cross_entropy_grad %g, %l, %y : tensor<f32>, tensor<4x32x256xf32>, tensor<4x16xi32>
  return
}
