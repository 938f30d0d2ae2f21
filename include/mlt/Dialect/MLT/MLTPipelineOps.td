//===- MLTPipelineOps.td - transfers between pipeline stages -*- tablegen -*-===//
//
// Part of mlt. The ops that join the stages of a pipeline-parallel program:
// `mlt.send` and `mlt.recv` move a tensor to and from the rank one step
// along a mesh axis (`pp`). mlt-partition-pipeline creates them at the
// stage boundaries of the forward pass; mlt-autodiff derives the backward
// pass's transfers from their gradient rules (the gradient of a received
// activation is sent back, the gradient of a sent one comes back).
//
// Included from MLTOps.td (it uses that file's constraints and base classes).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_MLTPIPELINEOPS_TD
#define MLT_DIALECT_MLT_MLTPIPELINEOPS_TD

def MLT_TransferResource : Resource<"::mlt::TransferResource">;

class MLT_TransferOp<string mnemonic, list<Trait> traits = []>
    : MLT_Op<mnemonic, traits # [MLT_Differentiable,
        MemoryEffects<[MemRead<MLT_TransferResource>,
                       MemWrite<MLT_TransferResource>]>]> {
  let hasVerifier = 1;
  code transferClassDeclaration = [{
    /// The size of the mesh axis the transfer runs along, or failure (with
    /// a diagnostic) when the module has no such axis.
    ::mlir::FailureOr<int64_t> getAxisSize();
  }];
}

def MLT_SendOp : MLT_TransferOp<"send"> {
  let summary = "sends a tensor to the rank `shift` steps along a mesh axis";
  let description = [{
    The rank whose coordinate on `axis` is this rank's plus `shift` (+1: the
    next pipeline stage, -1: the previous one), every other coordinate the
    same, receives `input` with the matching `mlt.recv`. Sends and receives
    between two ranks pair up in order. The input is laid out as `sharding`
    says (a block per rank of the other axes); the receiver declares the
    same layout.

    Its gradient is received: `mlt-autodiff` starts a non-last stage's
    backward pass from the `mlt.recv` of the sent value's gradient, from the
    same peer (the same `shift`).

    Example:
    ```mlir
    mlt.send %h to "pp" shift 1 : tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, StrAttr:$axis, I64Attr:$shift,
                       OptionalAttr<MLT_ShardingAttr>:$layout);
  let assemblyFormat = [{
    $input `to` $axis `shift` $shift attr-dict `:` type($input)
    (`layout` custom<Sharding>($layout)^)?
  }];
  let extraClassDeclaration = transferClassDeclaration;
}

def MLT_RecvOp : MLT_TransferOp<"recv"> {
  let summary = "receives a tensor from the rank `shift` steps along a mesh axis";
  let description = [{
    What the rank whose coordinate on `axis` is this rank's plus `shift`
    sends with the matching `mlt.send`, of the declared type and laid out as
    `layout` says.

    Its gradient is sent back: the result's gradient goes to the sender with
    `mlt.send` to the same peer (the same `shift`).

    Example:
    ```mlir
    %h = mlt.recv from "pp" shift -1 : tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$axis, I64Attr:$shift,
                       OptionalAttr<MLT_ShardingAttr>:$layout);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    `from` $axis `shift` $shift attr-dict `:` type($result)
    (`layout` custom<Sharding>($layout)^)?
  }];
  let extraClassDeclaration = transferClassDeclaration;
}

#endif // MLT_DIALECT_MLT_MLTPIPELINEOPS_TD
