//===- MLTShardingOps.td - sharding constraints and collectives -*- tablegen -*-===//
//
// Part of mlt. The ops of sharded programs: `mlt.shard`, a layout constraint
// that users (or mlt-annotate-layout) place in a global program, and the
// collectives that mlt-spmdize inserts into the per-rank program it derives.
// Collectives name a mesh axis of the module's `mlt.mesh`; every rank of the
// axis's group runs them in the same order (one program serves all ranks).
//
// Included from MLTOps.td (it uses that file's constraints and base classes).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTSHARDINGOPS_TD
#define MLT_DIALECT_MLT_MLTSHARDINGOPS_TD

def MLT_ShardOp : MLT_PureOp<"shard", [MLT_Differentiable,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "constrains the sharding of a value (identity on its data)";
  let description = [{
    The value, laid out as `sharding` says: sharding propagation treats the
    result as a user annotation, and the partitioner reshards the input into
    it (a reduce-scatter when the input is a partial sum, an all-gather or a
    local slice otherwise). `?` dimensions stay open to propagation. Its
    gradient is constrained the same way, so a sequence-parallel residual
    stream is sequence-parallel in the backward pass too.

    Example (sequence parallelism: the residual stream split along the
    sequence over `tp`):
    ```mlir
    %h2 = mlt.shard %h : tensor<4x32x64xf32> to #mlt.sharding<[?, tp, ?]>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, MLT_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input `:` type($input) `to` custom<Sharding>($sharding) attr-dict";
  let hasVerifier = 1;
}

class MLT_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : MLT_PureOp<mnemonic, traits> {
  let hasVerifier = 1;
  code collectiveClassDeclaration = [{
    /// The size of the mesh axis this collective runs over, or failure (with
    /// a diagnostic) when the module has no such axis.
    ::mlir::FailureOr<int64_t> getAxisSize();
  }];
}

def MLT_AllReduceOp : MLT_CollectiveOp<"all_reduce", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "sums a value over the ranks of a mesh axis";
  let description = [{
    Every rank of the axis's group gets the sum of the group's inputs (what a
    partial sum over `axis` needs to become whole), summed in group order so
    that the ranks agree bit for bit.

    Example:
    ```mlir
    %full = mlt.all_reduce %partial over "tp" : tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input, StrAttr:$axis);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = "$input `over` $axis attr-dict `:` type($input)";
  let extraClassDeclaration = collectiveClassDeclaration;
}

def MLT_AllGatherOp : MLT_CollectiveOp<"all_gather"> {
  let summary = "concatenates the blocks of a split dimension across a mesh axis";
  let description = [{
    The inverse of splitting dimension `dim` over `axis`: the result's `dim`
    is the concatenation, in group order, of every group member's input, so
    it is `G` times larger (`G` the axis size).

    Example:
    ```mlir
    %x = mlt.all_gather %xs over "tp" dim 1 : tensor<4x16x64xf32> -> tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

def MLT_ReduceScatterOp : MLT_CollectiveOp<"reduce_scatter"> {
  let summary = "sums over a mesh axis and keeps this rank's block of one dimension";
  let description = [{
    A partial sum over `axis` becomes whole and split along `dim`: the rank
    with coordinate `c` gets block `c` (of `G`) of dimension `dim` of the
    group's sum. Half the traffic of an all-reduce followed by a slice.

    Example:
    ```mlir
    %ys = mlt.reduce_scatter %partial over "tp" dim 1 : tensor<4x32x64xf32> -> tensor<4x16x64xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs MLT_FloatTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

def MLT_AllToAllOp : MLT_CollectiveOp<"all_to_all"> {
  let summary = "moves a mesh axis's split from one dimension to another";
  let description = [{
    Every rank splits dimension `split` of its input into `G` blocks (`G`
    the axis size) and sends block `j` to the group member of coordinate
    `j`; the result's dimension `concat` is the concatenation, in group
    order, of the blocks the members sent this rank. So a value split over
    `axis` along `concat` becomes one split along `split`, each rank moving
    (G-1)/G of its bytes: context parallelism's all-to-all (Ulysses)
    exchange, the sequence gathered and the heads scattered before
    attention, and back after it.

    Example:
    ```mlir
    %y = mlt.all_to_all %x over "cp" split 2 concat 1 : tensor<1x16x8x32xf32> -> tensor<1x32x4x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$split,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$concat);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `split` $split `concat` $concat attr-dict `:`
    type($input) `->` type($result)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

def MLT_ReorderSequenceOp : MLT_CollectiveOp<"reorder_sequence", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "reorders a whole sequence between the load-balanced and the natural order";
  let description = [{
    Dimension `dim` is a whole sequence of `2 G` chunks (`G` the size of
    context axis `axis`): with `to_natural`, from the load-balanced order
    its tokens arrive in under context parallelism (rank i's block holding
    chunks i and 2G-1-i; SequenceOrder.h) to the natural one; without, back.
    Local: whole chunks move, nothing is sent. mlt-spmdize puts it around an
    attention of the all-to-all exchange, which then attends over the
    natural order (one causal attention, not one per pair of chunks).

    Example:
    ```mlir
    %n = mlt.reorder_sequence %q over "cp" dim 1 to_natural : tensor<1x64x4x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim,
                       UnitAttr:$to_natural);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `dim` $dim (`to_natural` $to_natural^)? attr-dict `:`
    type($input)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

def MLT_CollectivePermuteOp : MLT_CollectiveOp<"collective_permute", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "passes a value to the rank `shift` places further along a mesh axis";
  let description = [{
    Every rank of the axis's group sends its input to the member `shift`
    places after it, cyclically (coordinate c to (c + shift) mod G), and
    gets the input of the member `shift` places before it (`0 < shift <
    G`). XLA's collective-permute on a cycle: context parallelism's ring
    exchange (mlt-ring-attention) passes key/value blocks, and their
    gradients, one rank on per step.

    Example:
    ```mlir
    %k1 = mlt.collective_permute %k0 over "cp" shift 1 : tensor<1x16x2x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntPositive]>:$shift);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `shift` $shift attr-dict `:` type($input)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

//===----------------------------------------------------------------------===//
// Context parallelism's ring exchange (mlt-ring-attention)
//===----------------------------------------------------------------------===//

def MLT_AttentionBlockOp : MLT_Op<"attention_block", [Pure,
    AllTypesMatch<["query", "result"]>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "one ring step's attention: the rank's queries against one rank's block of keys";
  let description = [{
    The attention of `mlt.attention` (`q : [batch, seq, q_heads, head_dim]`,
    `k`, `v : [batch, seq, kv_heads, head_dim]`, grouped-query heads) on a
    sequence split over context axis `axis` of size `G` in its load-balanced
    order (SequenceOrder.h): the queries are this rank's block, the keys and
    values the block of the rank `step` places before it (cyclically,
    `step < G`), and `causal` masks by those positions. Besides the partial
    output it gives the log-sum-exp of each query's scores over these keys,
    `lse : [batch, q_heads, seq]` (f32, or f64 with f64 queries); a query
    that sees none of them gets out 0 and lse -inf. `mlt.attention_merge`
    combines the steps.

    Example:
    ```mlir
    %o, %lse = mlt.attention_block %q, %k, %v over "cp" step 1 causal scale = 0.25
        : tensor<1x16x4x16xf32>, tensor<1x16x2x16xf32>, tensor<1x16x2x16xf32>
          -> tensor<1x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$query, MLT_FloatTensor:$key,
                       MLT_FloatTensor:$value, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$step,
                       UnitAttr:$causal,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$scale);
  let results = (outs MLT_FloatTensor:$result, MLT_FloatTensor:$lse);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $query `,` $key `,` $value `over` $axis `step` $step (`causal` $causal^)?
    `scale` `=` $scale attr-dict `:` type($query) `,` type($key) `,`
    type($value) `->` type($lse)
  }];
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getResult(), "block");
      setNameFn(getLse(), "lse");
    }
  }];
}

def MLT_AttentionMergeOp : MLT_Op<"attention_merge", [Pure,
    AllTypesMatch<["out_a", "out_b", "result"]>,
    AllTypesMatch<["lse_a", "lse_b", "lse"]>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "merges two partial attentions of the same queries by their log-sum-exp";
  let description = [{
    `out_a`, `lse_a` and `out_b`, `lse_b` are attentions of the same
    queries over disjoint sets of keys (as `mlt.attention_block` gives
    them); the result is the attention over both:
    `lse = log(exp(lse_a) + exp(lse_b))` and
    `out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse)`, a side with lse
    -inf (it saw no key) taking no part.

    Example:
    ```mlir
    %o, %lse = mlt.attention_merge %o0, %l0, %o1, %l1 : tensor<1x16x4x16xf32>, tensor<1x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$out_a, MLT_FloatTensor:$lse_a,
                       MLT_FloatTensor:$out_b, MLT_FloatTensor:$lse_b);
  let results = (outs MLT_FloatTensor:$result, MLT_FloatTensor:$lse);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $out_a `,` $lse_a `,` $out_b `,` $lse_b attr-dict `:` type($out_a) `,`
    type($lse_a)
  }];
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getResult(), "merged");
      setNameFn(getLse(), "lse");
    }
  }];
}

def MLT_AttentionBlockGradOp : MLT_Op<"attention_block_grad", [Pure,
    AllTypesMatch<["grad", "query", "output", "query_grad"]>,
    AllTypesMatch<["key", "value", "key_grad", "value_grad"]>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "one ring step's attention gradients";
  let description = [{
    For the attention of this rank's queries over the whole sequence, whose
    output `out` and log-sum-exp `lse` merge every ring step (so each
    step's probabilities are the whole softmax's), given `dout`: this
    step's share of `dq` (the steps' shares sum to it), and `dk`, `dv` of
    the block of keys and values `k`, `v` of the rank `step` places before
    this one on `axis`, from this rank's queries (the ranks' sum is the
    block's gradient).

    Example:
    ```mlir
    %dq, %dk, %dv = mlt.attention_block_grad %dout, %q, %k, %v, %o, %lse over "cp" step 1 causal scale = 0.25
        : tensor<1x16x4x16xf32>, tensor<1x16x2x16xf32>, tensor<1x4x16xf32>
    ```
  }];
  let arguments = (ins MLT_FloatTensor:$grad, MLT_FloatTensor:$query,
                       MLT_FloatTensor:$key, MLT_FloatTensor:$value,
                       MLT_FloatTensor:$output, MLT_FloatTensor:$lse,
                       StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$step,
                       UnitAttr:$causal,
                       ConfinedAttr<F64Attr, [MLT_PositiveFloat]>:$scale);
  let results = (outs MLT_FloatTensor:$query_grad, MLT_FloatTensor:$key_grad,
                      MLT_FloatTensor:$value_grad);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $lse `over` $axis
    `step` $step (`causal` $causal^)? `scale` `=` $scale attr-dict `:`
    type($query) `,` type($key) `,` type($lse)
  }];
  let extraClassDefinition = [{
    void $cppClass::getAsmResultNames(::mlir::OpAsmSetValueNameFn setNameFn) {
      setNameFn(getQueryGrad(), "dq");
      setNameFn(getKeyGrad(), "dk");
      setNameFn(getValueGrad(), "dv");
    }
  }];
}

def MLT_ShardSliceOp : MLT_CollectiveOp<"shard_slice"> {
  let summary = "keeps this rank's block of a dimension (no communication)";
  let description = [{
    Splits a value every rank holds whole: the rank with coordinate `c` on
    `axis` keeps block `c` (of `G`) of dimension `dim`. Local: it reads the
    rank's coordinate, sends nothing.

    Example:
    ```mlir
    %xs = mlt.shard_slice %x over "tp" dim 2 : tensor<4x32x8x16xf32> -> tensor<4x32x4x16xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `over` $axis `dim` $dim attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDeclaration = collectiveClassDeclaration;
}

#endif // MLT_DIALECT_MLT_MLTSHARDINGOPS_TD
