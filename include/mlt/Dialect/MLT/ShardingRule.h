//===- ShardingRule.h - how an op's dimensions may be split -----*- C++ -*-===//
//
// Part of mlt. An op's sharding rule, in the factor notation of Shardy
// (OpShardingRule): the op's iteration space is a list of factors (think of
// the indices of an einsum); every dimension of every operand and result is
// a product of factors, major first. Splitting a factor over a mesh axis
// splits every dimension whose major factor it is. A factor that no result
// has is contracted: splitting it leaves the results partial sums over the
// axis. Sharding propagation (mlt-propagate-shardings) and the partitioner
// (mlt-spmdize) read nothing else about an op.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_DIALECT_MLT_SHARDINGRULE_H
#define MLT_DIALECT_MLT_SHARDINGRULE_H

#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlt {

struct ShardingRule {
  /// The factors of a dimension, major first; empty for a dimension no
  /// factor maps (it is never split).
  using Dim = llvm::SmallVector<int, 2>;
  using Tensor = llvm::SmallVector<Dim, 4>;

  /// The size of each factor.
  llvm::SmallVector<int64_t> factorSizes;
  /// Per operand and per result, per dimension: its factors. Non-tensor
  /// operands (layer indices) have no dimensions.
  llvm::SmallVector<Tensor> operands;
  llvm::SmallVector<Tensor> results;
  /// Factors the op needs whole on every rank (the normalized dimension of an
  /// RMSNorm, the sequence of a causal attention, the rotary pairs).
  llvm::SmallVector<bool> needsWhole;
  /// Factors that are a causal sequence's positions (the sequence of a
  /// rotary embedding, an attention's queries): split over the context axis
  /// only (axisName(ParallelAxis::Context)), whose blocks hold the sequence
  /// in its load-balanced order and tell the op its positions; whole
  /// otherwise.
  llvm::SmallVector<bool> sequence;
  /// Factors the op itself reduces across ranks when split, so that they
  /// leave no partial result (the vocabulary of a vocabulary-parallel
  /// cross-entropy).
  llvm::SmallVector<bool> reducedInternally;
  /// The op is linear in all its operands together: operands that are
  /// partial sums over the same axes give a result partial over them (add).
  bool linear = false;

  int addFactor(int64_t size, bool whole = false) {
    factorSizes.push_back(size);
    needsWhole.push_back(whole);
    sequence.push_back(false);
    reducedInternally.push_back(false);
    return factorSizes.size() - 1;
  }
  /// A factor of `sequence` positions.
  int addSequenceFactor(int64_t size) {
    int f = addFactor(size);
    sequence[f] = true;
    return f;
  }
  int numFactors() const { return factorSizes.size(); }
  /// Whether factor `f` appears in result `r`.
  bool resultHasFactor(unsigned r, int f) const {
    for (const Dim &dim : results[r])
      for (int g : dim)
        if (g == f)
          return true;
    return false;
  }
};

} // namespace mlt

#endif // MLT_DIALECT_MLT_SHARDINGRULE_H
