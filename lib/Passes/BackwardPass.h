//===- BackwardPass.h - the backward pass of a micro-step -------*- C++ -*-===//
//
// Part of mlt. What the recompute passes (mlt-recompute-activations,
// mlt-recompute-layers) ask of a micro-step's straight-line body: which ops
// are its backward pass, and which ops read a value's memory (the lowering
// gives a view the memory of the value it views).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_PASSES_BACKWARDPASS_H
#define MLT_LIB_PASSES_BACKWARDPASS_H

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace mlt {

/// The ops of `body` in the backward pass: where mlt-autodiff starts it (the
/// loss's gradient, `mlt.cross_entropy_grad`, and the op marked
/// `mlt.loss_seed`: the loss gradient's seed, or on a pipeline stage before
/// the last the receive of the gradient of what the stage sent), the
/// clones a recompute pass placed in it (marked `mlt.recomputed`), and every
/// op that uses a value computed in it. The body is straight-line code, so
/// one walk in program order finds them all.
llvm::DenseSet<mlir::Operation *> backwardOps(mlir::Block &body);

/// Whether `op` reads no tensor (mlt.load of a parameter, a constant): its
/// results are never temporaries, so a recomputed op reads them as they are.
bool readsNoTensor(mlir::Operation *op);

/// Whether `op` only renames its operand's memory: mlt-lower-to-runtime
/// gives the results of mlt.reshape and mlt.shard their operand's buffer.
bool isView(mlir::Operation *op);

/// The ops that read `value`'s memory: its users, and for a user that is a
/// view, the readers of the view instead.
void collectReaders(mlir::Value value,
                    llvm::SmallVectorImpl<mlir::Operation *> &readers);

} // namespace mlt

#endif // MLT_LIB_PASSES_BACKWARDPASS_H
