//===- MLTTrainingOps.td - backward and optimizer ops ------*- tablegen -*-===//
//
// Part of mlt. Ops of the training program that the model files never hold:
// the backward ops that `mlt-autodiff` creates from the gradient rules, the
// state ops through which gradients reach the parameters' gradient buffers,
// and the optimizer ops that `mlt-attach-optimizer` creates. All are consumed
// by the lowering to the runtime.
//
// Included from MLTOps.td (it uses that file's constraints and base classes).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTTRAININGOPS_TD
#define MLT_DIALECT_MLT_MLTTRAININGOPS_TD

// The training state: parameters, their gradients and optimizer moments, which
// live between the functions of a training step.
def MLT_StateResource : Resource<"::mlt::TrainingStateResource">;

// A float32 scalar: norms, hyper-parameters and coefficients of the optimizer.
def MLT_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

//===----------------------------------------------------------------------===//
// Backward ops (created by mlt-autodiff)
//===----------------------------------------------------------------------===//

def MLT_EmbeddingGradOp : MLT_PureOp<"embedding_grad"> {
  let summary = "gradient of an embedding table: scatter-add of output gradients";
  let description = [{
    `result[v, :] = sum of grad[p, :] over positions p with ids[p] == v`, zero
    for tokens that do not occur. Created by `mlt-autodiff` from
    `mlt.embedding`; the result type is the table's.

    Example:
    ```mlir
    %dtable = mlt.embedding_grad %ids, %dout
        : tensor<4x32xi32>, tensor<4x32x64xf32> -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins MLT_TokenTensor:$ids, MLT_FloatTensor:$grad);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $grad attr-dict `:` type($ids) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MLT_RMSNormGradOp : MLT_InferredOp<"rms_norm_grad"> {
  let summary = "gradients of RMSNorm with respect to its input and weight";
  let description = [{
    For `y = rms_norm(x, w)`, given `dy`: `dx` (the input's shape) and `dw`
    (summed over every row). The normalization statistics are recomputed from
    `x`. Created by `mlt-autodiff` from `mlt.rms_norm`.

    Example:
    ```mlir
    %dx, %dw = mlt.rms_norm_grad %dy, %x, %w eps = 1.0e-05
        : tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$grad, MLT_FloatTensor:$input,
                       MLT_FloatTensor:$weight,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$epsilon);
  let results = (outs MLT_FloatTensor:$input_grad, MLT_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `eps` `=` $epsilon attr-dict
    `:` type($grad) `,` type($input) `,` type($weight)
  }];
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getInputGrad(), "dx");
      setNameFn(getWeightGrad(), "dw");
    }
  }];
}

def MLT_AttentionGradOp : MLT_InferredOp<"attention_grad"> {
  let summary = "gradients of attention with respect to query, key and value";
  let description = [{
    For `out = attention(q, k, v)` with the same `causal` and `scale`, given
    `dout`: `dq`, `dk`, `dv` in the shapes of `q`, `k`, `v`. With grouped-query
    heads, `dk` and `dv` sum over the query heads of each group. `out` is the
    forward result; the lowering uses it (and the softmax statistics the
    forward kernel saved) so probabilities are recomputed, never stored.
    Created by `mlt-autodiff` from `mlt.attention`.

    Example:
    ```mlir
    %dq, %dk, %dv = mlt.attention_grad %dout, %q, %k, %v, %out causal scale = 0.25
        : tensor<4x32x4x16xf32>, tensor<4x32x4x16xf32>, tensor<4x32x2x16xf32>,
          tensor<4x32x2x16xf32>, tensor<4x32x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$grad, MLT_FloatTensor:$query,
                       MLT_FloatTensor:$key, MLT_FloatTensor:$value,
                       MLT_FloatTensor:$output, UnitAttr:$causal,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$scale);
  let results = (outs MLT_FloatTensor:$query_grad, MLT_FloatTensor:$key_grad,
                      MLT_FloatTensor:$value_grad);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output (`causal` $causal^)?
    `scale` `=` $scale attr-dict `:` type($grad) `,` type($query) `,`
    type($key) `,` type($value) `,` type($output)
  }];
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getQueryGrad(), "dq");
      setNameFn(getKeyGrad(), "dk");
      setNameFn(getValueGrad(), "dv");
    }
  }];
}

def MLT_SwiGLUGradOp : MLT_PureOp<"swiglu_grad",
    [AllTypesMatch<["grad", "gate", "up", "gate_grad", "up_grad"]>]> {
  let summary = "gradients of SwiGLU with respect to gate and up";
  let description = [{
    For `y = silu(gate) * up`, given `dy`: `dgate = dy * up * silu'(gate)` and
    `dup = dy * silu(gate)`. Created by `mlt-autodiff` from `mlt.swiglu`.

    Example:
    ```mlir
    %dgate, %dup = mlt.swiglu_grad %dy, %gate, %up : tensor<4x32x176xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$grad, MLT_FloatTensor:$gate,
                       MLT_FloatTensor:$up);
  let results = (outs MLT_FloatTensor:$gate_grad, MLT_FloatTensor:$up_grad);
  let assemblyFormat = "$grad `,` $gate `,` $up attr-dict `:` type($grad)";
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getGateGrad(), "dgate");
      setNameFn(getUpGrad(), "dup");
    }
  }];
}

def MLT_SiLUGradOp : MLT_PureOp<"silu_grad",
    [AllTypesMatch<["grad", "input", "result"]>]> {
  let summary = "gradient of SiLU: grad * silu'(input)";
  let description = [{
    `result = grad * sigmoid(x) * (1 + x * (1 - sigmoid(x)))`. Created by
    `mlt-autodiff` from `mlt.silu`.

    Example:
    ```mlir
    %dx = mlt.silu_grad %dy, %x : tensor<4x32x176xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$grad, MLT_FloatTensor:$input);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($grad)";
}

def MLT_CrossEntropyGradOp : MLT_InferredOp<"cross_entropy_grad"> {
  let summary = "gradient of the mean cross-entropy with respect to the logits";
  let description = [{
    `result[p, :] = (softmax(logits[p, :]) - onehot(labels[p])) * grad / N`,
    where `grad` is the scalar gradient of the loss and `N` the number of
    positions. Created by `mlt-autodiff` from `mlt.cross_entropy`.

    Example:
    ```mlir
    %dlogits = mlt.cross_entropy_grad %dloss, %logits, %labels
        : tensor<f32>, tensor<4x32x256xf32>, tensor<4x32xi32>
    ```
  }];
  let arguments = (ins MLT_ScalarLoss:$grad, MLT_FloatTensor:$logits,
                       MLT_TokenTensor:$labels);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $logits `,` $labels attr-dict `:` type($grad) `,` type($logits)
    `,` type($labels)
  }];
}

//===----------------------------------------------------------------------===//
// Training state (created by mlt-autodiff and mlt-attach-optimizer)
//===----------------------------------------------------------------------===//

def MLT_AccumulateGradOp : MLT_Op<"accumulate_grad", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MLT_StateResource>, MemWrite<MLT_StateResource>]>]> {
  let summary = "adds a value to a parameter's gradient buffer";
  let description = [{
    `grad(@param[layer]) += value`. The gradient buffers are zeroed at the
    start of every training step and accumulate over its micro-batches.
    `mlt-autodiff` creates it as the gradient rule of `mlt.load`; the
    optimizer reads the sum with `mlt.load_grad`.

    Example:
    ```mlir
    mlt.accumulate_grad @"model.layers.{}.mlp.up_proj.weight"[%c1], %dw : tensor<176x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Optional<Index>:$layer,
                       MLT_FloatTensor:$value);
  let assemblyFormat = [{
    $name (`[` $layer^ `]`)? `,` $value attr-dict `:` type($value)
  }];
}

def MLT_LoadGradOp : MLT_Op<"load_grad", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MLT_StateResource>]>]> {
  let summary = "reads the accumulated gradient of a parameter";
  let description = [{
    The sum of every `mlt.accumulate_grad` into `@param[layer]` since the
    step began. Created by `mlt-attach-optimizer`.

    Example:
    ```mlir
    %g = mlt.load_grad @"model.norm.weight" : tensor<64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Optional<Index>:$layer);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$name (`[` $layer^ `]`)? attr-dict `:` type($result)";
}

def MLT_HyperparameterOp : MLT_PureOp<"hyperparameter"> {
  let summary = "reads a training hyper-parameter that the runtime sets each step";
  let description = [{
    One of `lr` (this step's learning rate, from the schedule), `beta1`,
    `beta2`, `eps`, `weight_decay`, `max_grad_norm` (0 disables clipping) and
    `step` (the 1-based optimizer step, for bias correction). The runtime
    writes them before each step, so a compiled plan trains with any
    optimizer settings. Created by `mlt-attach-optimizer`.

    Example:
    ```mlir
    %lr = mlt.hyperparameter "lr" : tensor<f32>
    ```
  }];
  let arguments = (ins StrAttr:$hyperparameter);
  let results = (outs MLT_F32Scalar:$result);
  let assemblyFormat = "$hyperparameter attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getResult(), getHyperparameter());
    }
  }];
  let extraClassDeclaration = [{
    /// The names the runtime knows, in the order of its step-scalar buffer.
    static ::llvm::ArrayRef<::llvm::StringRef> getKnownNames();
  }];
}

def MLT_SumSquaresOp : MLT_PureOp<"sum_squares"> {
  let summary = "sum of the squares of a tensor's elements, as a float32 scalar";
  let description = [{
    Accumulated in at least float64 on the runtime's side. Created by
    `mlt-attach-optimizer` for the global gradient norm.

    Example:
    ```mlir
    %s = mlt.sum_squares %g : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input);
  let results = (outs MLT_F32Scalar:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def MLT_GlobalNormOp : MLT_PureOp<"global_norm"> {
  let summary = "square root of a sum of sums of squares";
  let description = [{
    `sqrt(s0 + s1 + ...)`: the L2 norm of all gradients together, from the
    `mlt.sum_squares` of each. Created by `mlt-attach-optimizer`.

    Example:
    ```mlir
    %norm = mlt.global_norm %s0, %s1, %s2 : tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<MLT_F32Scalar>:$sums);
  let results = (outs MLT_F32Scalar:$result);
  let assemblyFormat = "$sums attr-dict `:` type($result)";
}

def MLT_ClipCoefficientOp : MLT_PureOp<"clip_coefficient"> {
  let summary = "the factor that scales gradients to a maximum global norm";
  let description = [{
    `min(1, max_norm / (norm + 1e-6))`, as torch.nn.utils.clip_grad_norm_
    computes it; 1 when `max_norm` is 0 (clipping off). Created by
    `mlt-attach-optimizer`.

    Example:
    ```mlir
    %coef = mlt.clip_coefficient %norm, %max_norm : tensor<f32>
    ```
  }];
  let arguments = (ins MLT_F32Scalar:$norm, MLT_F32Scalar:$max_norm);
  let results = (outs MLT_F32Scalar:$result);
  let assemblyFormat = "$norm `,` $max_norm attr-dict `:` type($result)";
}

def MLT_AdamWOp : MLT_Op<"adamw", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead<MLT_StateResource>, MemWrite<MLT_StateResource>]>]> {
  let summary = "one AdamW update of a parameter and its moments";
  let description = [{
    With `g = grad * grad_scale` and `t = step`, as torch.optim.AdamW:
    ```
    p *= 1 - lr * weight_decay                (only with `decay`)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g^2
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    ```
    The parameter and its two float32 moments are the training state of
    `@param[layer]`. `mlt-attach-optimizer` sets `decay` on parameters of two
    or more dimensions (embeddings included, norm weights excluded).

    Example:
    ```mlir
    mlt.adamw @"model.layers.{}.mlp.up_proj.weight"[%c0] grad %g scale %coef
        lr %lr betas %b1, %b2 eps %eps weight_decay %wd step %t decay
        : tensor<176x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Optional<Index>:$layer,
                       MLT_FloatTensor:$grad, MLT_F32Scalar:$grad_scale,
                       MLT_F32Scalar:$lr, MLT_F32Scalar:$beta1,
                       MLT_F32Scalar:$beta2, MLT_F32Scalar:$eps,
                       MLT_F32Scalar:$weight_decay, MLT_F32Scalar:$step,
                       UnitAttr:$decay);
  let assemblyFormat = [{
    $name (`[` $layer^ `]`)? `grad` $grad `scale` $grad_scale `lr` $lr
    `betas` $beta1 `,` $beta2 `eps` $eps `weight_decay` $weight_decay
    `step` $step (`decay` $decay^)? attr-dict `:` type($grad)
  }];
}

#endif // MLT_DIALECT_MLT_MLTTRAININGOPS_TD
