//===- RuntimeDialect.td - the lowered, runtime-level dialect -*- tablegen -*-===//
//
// Part of mlt. `mlt_rt` is what a training program looks like to the runtime:
// named buffers with arena offsets, and programs that are ordered lists of
// kernel launches on those buffers. `mlt-lower-to-runtime` creates it from the
// training program, `mlt-plan-memory` gives the buffers their offsets, and the
// plan exporter writes it out as a plan file, op for op.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_TD
#define MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def MLTRT_Dialect : Dialect {
  let name = "mlt_rt";
  let cppNamespace = "::mlt::rt_ir";
  let summary = "runtime-level ops: buffers and kernel launches";
  let description = [{
    The last IR before the plan file. There are no SSA values: buffers are
    symbols (`mlt_rt.buffer`) with a kind, a tensor type and, after memory
    planning, an arena offset; a program (`mlt_rt.program`) is a list of
    `mlt_rt.launch` ops naming a kernel of `Kernels.def` and the buffers it
    reads and writes. This mirrors the plan file one to one, so a plan can be
    read back and inspected as IR.
  }];
}

class MLTRT_Op<string mnemonic, list<Trait> traits = []>
    : Op<MLTRT_Dialect, mnemonic, traits>;

def MLTRT_BufferKind : I32EnumAttr<"BufferKind", "what a buffer holds", [
    I32EnumAttrCase<"parameter", 0>,
    I32EnumAttrCase<"gradient", 1>,
    I32EnumAttrCase<"optimizer_state", 2>,
    I32EnumAttrCase<"input", 3>,
    I32EnumAttrCase<"output", 4>,
    I32EnumAttrCase<"temporary", 5>,
    I32EnumAttrCase<"constant", 6>,
    I32EnumAttrCase<"parameter_copy", 7>]> {
  let cppNamespace = "::mlt::rt_ir";
}

def MLTRT_BufferOp : MLTRT_Op<"buffer", [Symbol, HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a named range of the arena";
  let description = [{
    Declares a buffer of the given tensor type. Parameters, gradients and
    optimizer states name their parameter (HF name) in `parameter`; inputs and
    outputs are written and read by the runtime by their symbol name
    (`tokens`, `labels`, `hyper.lr`, `loss`, ...); constants hold `value` in
    every element. `mlt-lower-to-runtime` creates it; `mlt-plan-memory` sets
    `offset`, in bytes.

    A buffer with `per_microbatch N` holds one copy of its type for each of
    the step's N micro-batches (the tokens, labels and loss of each): a
    launch in a call of micro-batch k (`mlt_rt.call ... microbatch k`)
    touches copy k. A temporary with `per_slot S` is an activation that a
    forward body leaves for its backward body, one copy for each of the S
    micro-batches the schedule keeps in flight at once: a launch in a call
    of slot s (`mlt_rt.call ... slot s`) touches copy s. A temporary with
    `step_kept` holds, from the step's first call that touches it to its
    last, one value for the whole step: the first call writes it and later
    calls (other micro-batches') read it, as the largest magnitude of an
    FP8 product's weight and its transposed copy, computed once a step
    (mlt-keep-weight-fp8). Copy k
    starts
    `k * align(bytes, 256)` bytes after `offset` (PlanFormat.h's
    kPlanBufferAlignment).

    Flat buffers (mlt-partition-optimizer, ZeRO). A buffer with `view` is
    a name for bytes inside another buffer (its base, which is no view):
    `view_offset` elements after the base's start, e.g. a parameter's
    gradient inside its bucket's flat buffer. A buffer with `shard = "dp"`
    of n elements holds, on the rank of coordinate c on mesh axis dp, the
    elements [c * n, (c + 1) * n) of a flat buffer's layout: of its base
    when it is a view (then it lies there: the rank's slice of a bucket, a
    rank-dependent place that the plan export resolves per rank), else of
    the buffer `layout` names (a master-weight or moment slice stored
    apart). The layout's views that name a parameter say which ranges of
    which parameters the slice covers; with `owns` the slice holds those
    ranges' state (parameters, reduced gradients, moments), which the plan
    file lists as its segments, and the buffer names no parameter. A flat
    buffer that views lie in is marked `bucket`. A slice over several axes
    names them joined by `*`, major first, as a sharding does (`shard =
    "dp*cp"`: the rank's index among the slices is c(dp) x size(cp) +
    c(cp), its block of its dp block). `shard_shift = k` (one axis only)
    names another rank's slice: the one of coordinate (c + k) mod size, as
    a collective matmul reads a block another rank gathered to this one.

    Example:
    ```mlir
    mlt_rt.buffer @"param:model.norm.weight" parameter offset 0 {parameter = "model.norm.weight"} : tensor<64xf32>
    mlt_rt.buffer @"grad_bucket.0" gradient {bucket} : tensor<512xf32>
    mlt_rt.buffer @"grad:model.norm.weight" gradient {parameter = "model.norm.weight", view = @"grad_bucket.0", view_offset = 128} : tensor<64xf32>
    mlt_rt.buffer @"grad_shard.0" gradient {owns, shard = "dp", view = @"grad_bucket.0"} : tensor<256xf32>
    mlt_rt.buffer @"exp_avg_shard.0" optimizer_state {layout = @"grad_bucket.0", owns, shard = "dp"} : tensor<256xf32>
    mlt_rt.buffer @tokens input per_microbatch 4 : tensor<2x128xi32>
    mlt_rt.buffer @t12 temporary : tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, MLTRT_BufferKind:$kind,
                       TypeAttrOf<RankedTensorOf<[AnySignlessInteger, AnyFloat]>>:$type,
                       OptionalAttr<I64Attr>:$per_microbatch,
                       OptionalAttr<I64Attr>:$per_slot,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<StrAttr>:$parameter,
                       UnitAttr:$decay,
                       OptionalAttr<F64Attr>:$value,
                       OptionalAttr<FlatSymbolRefAttr>:$view,
                       OptionalAttr<I64Attr>:$view_offset,
                       OptionalAttr<StrAttr>:$shard,
                       OptionalAttr<I64Attr>:$shard_shift,
                       OptionalAttr<FlatSymbolRefAttr>:$layout,
                       UnitAttr:$owns,
                       UnitAttr:$bucket,
                       UnitAttr:$step_kept);
  let assemblyFormat = [{
    $sym_name $kind (`per_microbatch` $per_microbatch^)?
    (`per_slot` $per_slot^)? (`step_kept` $step_kept^)? (`offset` $offset^)?
    attr-dict `:` $type
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Size in bytes of one copy: elements times the element size.
    uint64_t getByteSize();
    /// Copies: the micro-batches of `per_microbatch`, the slots of
    /// `per_slot`, else 1.
    int64_t getCopies() {
      if (getPerMicrobatchAttr())
        return getPerMicrobatchAttr().getInt();
      return getPerSlotAttr() ? getPerSlotAttr().getInt() : 1;
    }
    /// The bytes of the arena the buffer spans, all copies included.
    uint64_t getExtentBytes();
    /// The flat buffer whose layout a slice (`shard`) covers: its base when
    /// it is a view, else `layout`; null for other buffers.
    ::mlir::FlatSymbolRefAttr getLayoutSource() {
      if (!getShardAttr())
        return nullptr;
      return getViewAttr() ? getViewAttr() : getLayoutAttr();
    }
    /// The axes of a slice (`shard`), major first; empty for other buffers.
    ::llvm::SmallVector<::llvm::StringRef, 2> getShardAxes() {
      ::llvm::SmallVector<::llvm::StringRef, 2> axes;
      if (getShardAttr())
        getShardAttr().getValue().split(axes, '*');
      return axes;
    }
  }];
}

def MLTRT_ProgramOp : MLTRT_Op<"program", [
    Symbol, HasParent<"::mlir::ModuleOp">, NoTerminator, SingleBlock,
    NoRegionArguments]> {
  let summary = "an ordered list of launches that the runtime runs as one unit";
  let description = [{
    A program runs from its first launch to its last. Programs are the
    bodies that a training step (`mlt_rt.step`) calls: `micro_step` (the
    forward and backward pass of one micro-batch), its variants for the
    step's first and last micro-batch, and `optimizer_step`; and
    `refresh_parameter_copies`, which the runtime runs on its own after it
    writes parameters.

    A micro-step body (the forward and backward pass of a micro-batch) may
    record `backward_start k`: its launches from the k-th on are the
    backward pass (mlt-lower-to-runtime sets it at the first launch that
    reads the loss-gradient seed); mlt-schedule-pipeline splits the body
    there when a schedule separates a micro-batch's forward from its
    backward.

    Launches go to streams (`stream`, 0 by default: the compute stream).
    Each stream runs its launches in program order; across streams, a launch
    starts after the launches whose `token`s it `waits` for. A program starts
    after everything before it and ends when every stream has run its
    launches, so program order is always one valid order of the launches
    (the CPU backend runs them so). The verifier requires every token to be
    signalled once, by a launch before any that waits for it.

    Example:
    ```mlir
    mlt_rt.program @micro_step {
      mlt_rt.launch "embedding_fwd" [@tokens, @"param:model.embed_tokens.weight"] -> [@t0] ints [128, 256, 64]
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<I64Attr>:$backward_start);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name (`backward_start` $backward_start^)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::llvm::StringRef":$name), [{
      build($_builder, $_state, name, ::mlir::IntegerAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// Whether it launches sends and receives alone (at least one): a
    /// pipeline stage's transfer program, whose adjacent calls in a step
    /// form one group (Kernels.def's "Transfers").
    bool isTransferProgram();
  }];
}

def MLTRT_LaunchOp : MLTRT_Op<"launch", [
    HasParent<"ProgramOp">, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "runs one kernel on named buffers";
  let description = [{
    Launches `kernel` (a name from Kernels.def) reading the `inputs` buffers
    and writing the `outputs` buffers, with integer and float attributes in
    the order Kernels.def gives. The kernel's arity is checked against
    Kernels.def.

    `stream` names the stream it runs on (absent: 0, the compute stream),
    `waits` the tokens it starts after, and `token` the token it signals when
    it is done (ProgramOp says how they order launches).

    Example:
    ```mlir
    mlt_rt.launch "rms_norm_fwd" [@t0, @"param:model.norm.weight"] -> [@t1] ints [128, 64] floats [1.0e-05]
    mlt_rt.launch "matmul" [@t7, @t8] -> [@"grad:w"] ints [64, 64, 128, 1, 0] token 3
    mlt_rt.launch "all_reduce_sum" [@"grad:w"] -> [@"grad:w"] ints [4096, 0] stream 1 waits [3]
    ```
  }];
  let arguments = (ins StrAttr:$kernel, SymbolRefArrayAttr:$inputs,
                       SymbolRefArrayAttr:$outputs,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$ints,
                       DefaultValuedAttr<DenseF64ArrayAttr, "{}">:$floats,
                       OptionalAttr<I64Attr>:$stream,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$waits,
                       OptionalAttr<I64Attr>:$token);
  let assemblyFormat = [{
    $kernel $inputs `->` $outputs (`ints` $ints^)? (`floats` $floats^)?
    (`stream` $stream^)? (`waits` $waits^)? (`token` $token^)? attr-dict
  }];
  let builders = [
    // A launch on the compute stream, with no waits and no token.
    OpBuilder<(ins "::llvm::StringRef":$kernel,
                   "::llvm::ArrayRef<::mlir::Attribute>":$inputs,
                   "::llvm::ArrayRef<::mlir::Attribute>":$outputs,
                   "::llvm::ArrayRef<int64_t>":$ints,
                   CArg<"::llvm::ArrayRef<double>", "{}">:$floats), [{
      build($_builder, $_state, $_builder.getStringAttr(kernel),
            $_builder.getArrayAttr(inputs), $_builder.getArrayAttr(outputs),
            $_builder.getDenseI64ArrayAttr(ints),
            $_builder.getDenseF64ArrayAttr(floats), ::mlir::IntegerAttr(),
            $_builder.getDenseI64ArrayAttr({}), ::mlir::IntegerAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// The stream the launch runs on (0: compute).
    int64_t getStreamIndex() {
      return getStream() ? *getStream() : 0;
    }
    /// On the compute stream, with no waits and no token: ordered by
    /// program order alone.
    bool isPlain() {
      return getStreamIndex() == 0 && getWaits().empty() && !getToken();
    }
    /// A send or a receive (KernelInfo.h's isTransferKernel).
    bool isTransfer();
  }];
  let hasVerifier = 1;
}

def MLTRT_StepOp : MLTRT_Op<"step", [
    Symbol, HasParent<"::mlir::ModuleOp">, NoTerminator, SingleBlock,
    NoRegionArguments]> {
  let summary = "a whole training step: the schedule of calls of programs";
  let description = [{
    `@step` is the one program the runtime runs per training step, on every
    rank:
    an ordered list of `mlt_rt.call`s, each running a program (a body) for
    one micro-batch of the step or for none (the optimizer update). The
    order is the compiler's: the runtime writes the step's inputs, runs the
    step and reads its outputs, and never chooses a program itself. Each
    call names the work of the schedule it does (`F3.0`: the forward pass
    of micro-batch 3 through model chunk 0; PipelineSchedule.h), so the
    schedule is data in the IR, printed here and by `mlt-run
    --print-schedule`.

    A call starts after the previous one has ended on every stream, so
    program order stays a valid order of all launches of the step; its
    programs' tokens are its own. The CUDA runtime captures the whole step
    as one graph.

    `mlt-schedule-pipeline` creates it from the lowered bodies;
    `mlt-schedule-overlap` retargets the call of the last micro-batch to a
    copy of its body that also reduces the gradients; the plan exporter
    writes it as each rank's step.

    A module with an evaluation body (mlt-attach-evaluation) has a second
    step, `@eval_step` (beside `@step`, the training step): every
    micro-batch's forward pass and loss alone, which the runtime runs
    between training steps to evaluate held-out batches; the exporter
    writes it as each rank's `eval_step`. Its calls do forward items alone.

    Example:
    ```mlir
    mlt_rt.step @step {
      mlt_rt.call @micro_step_first microbatch 0 work [F0.0, B0.0]
      mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
      mlt_rt.call @optimizer_step
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def MLTRT_CallOp : MLTRT_Op<"call", [
    HasParent<"StepOp">, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "runs a program for one micro-batch of the step";
  let description = [{
    Runs the launches of `program`. With `microbatch k`, every buffer with
    `per_microbatch` that they touch is taken at copy k (the tokens of
    micro-batch k, its loss); without, they may touch none. Likewise `slot
    s` picks copy s of every `per_slot` buffer (the activations a forward
    body keeps for its backward body: the forward and the backward call of
    a micro-batch name the same slot). `work` lists the schedule's items
    that the call does, in order (`F<mb>.<chunk>`, `B..`, `W..`); each
    item's micro-batch is the call's.

    Example:
    ```mlir
    mlt_rt.call @micro_step microbatch 1 work [F1.0, B1.0]
    mlt_rt.call @forward microbatch 2 slot 0 work [F2.0]
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$program,
                       OptionalAttr<I64Attr>:$microbatch,
                       OptionalAttr<I64Attr>:$slot,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$work);
  let assemblyFormat = [{
    $program (`microbatch` $microbatch^)? (`slot` $slot^)?
    (`work` custom<Work>($work)^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The work items, decoded from `work` (kind, micro-batch, chunk
    /// triples).
    ::llvm::SmallVector<::mlt::WorkItem> getWorkItems();
    static ::llvm::SmallVector<int64_t>
    encodeWork(::llvm::ArrayRef<::mlt::WorkItem> items);
    /// Whether the call does schedule items (a body's call; not a
    /// transfer's, the zeroing's or the optimizer step's).
    bool hasWork() { return !getWork().empty(); }
  }];
}

#endif // MLT_DIALECT_RUNTIME_RUNTIMEDIALECT_TD
