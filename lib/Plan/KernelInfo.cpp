//===- KernelInfo.cpp - the kernel table as C++ values --------------------===//
//
// Part of mlt. Each kernel's rule: what its attributes, named in
// Kernels.def, imply (the element counts of its operands, their ranges, its
// FLOPs); then which operands are ids or the optimizer's fixed f32 scalars,
// their precisions, and which outputs may be written in place of an input.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::rt;

[[noreturn]] void mlt::rt::detail::badAttributeList(Kernel kernel,
                                                    std::string_view name,
                                                    const char *what) {
  std::fprintf(stderr, "mlt: %.*s's attribute '%.*s' %s\n",
               int(kernelName(kernel).size()), kernelName(kernel).data(),
               int(name.size()), name.data(), what);
  std::abort();
}

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

namespace {

/// The product of `factors`, or -1 on overflow (or a negative factor).
int64_t product(std::initializer_list<int64_t> factors) {
  int64_t result = 1;
  for (int64_t factor : factors)
    if (factor < 0 || __builtin_mul_overflow(result, factor, &result))
      return -1;
  return result;
}

/// What every rule reads: the instruction, its attributes by the names of K
/// (a rule derives from this, so it names them unqualified: `a[rows]`), and
/// the size of its mesh axis. A rule defines
///   OperandCounts counts() const   every operand's element count,
/// and where the defaults do not hold,
///   Status check() const           ranges beyond "not negative" (none),
///   double flops() const           (0: a kernel bound by memory traffic).
template <typename K> struct RuleBase : K {
  RuleBase(const InstructionDesc &inst, int64_t groupSize)
      : inst(inst), a(inst), groupSize(groupSize) {}

  Status check() const { return Status::ok(); }
  double flops() const { return 0.0; }

  /// Fails unless every attribute of `names` is 0 or 1.
  Status flags(std::initializer_list<typename K::Int> names) const {
    for (typename K::Int name : names)
      if (a[name] > 1)
        return errorf(join(names), " must be 0 or 1, got ints ",
                      formatInts(inst.ints));
    return Status::ok();
  }
  /// Fails unless every attribute of `names` is positive.
  Status positive(std::initializer_list<typename K::Int> names) const {
    for (typename K::Int name : names)
      if (a[name] < 1)
        return errorf(join(names), " must be positive, got ints ",
                      formatInts(inst.ints));
    return Status::ok();
  }
  /// `n` copies of `count` as the inputs and `m` as the outputs.
  static OperandCounts all(int64_t count, size_t n, size_t m) {
    return {std::vector<int64_t>(n, count), std::vector<int64_t>(m, count)};
  }

  const InstructionDesc &inst;
  const KernelAttrs<K> a;
  const int64_t groupSize;

private:
  /// "a", "a and b", "a, b and c".
  static std::string join(std::initializer_list<typename K::Int> names) {
    const AttributeNames &listed = kernelSignature(K::kernel).intNames;
    std::string text;
    size_t i = 0;
    for (typename K::Int name : names) {
      if (i)
        text += i + 1 == names.size() ? " and " : ", ";
      text += listed[name];
      ++i;
    }
    return text;
  }
};

/// The rule of kernel K; every kernel of Kernels.def has one below (the
/// table at the end does not compile without it). Comments give the operands
/// with their shapes, as Kernels.def does.
template <typename K> struct Rule;

template <> struct Rule<attrs::EmbeddingFwd> : RuleBase<attrs::EmbeddingFwd> {
  using RuleBase::RuleBase;
  // ids [tokens], table [vocab, hidden] -> out [tokens, hidden]
  OperandCounts counts() const {
    return {{a[tokens], product({a[vocab], a[hidden]})},
            {product({a[tokens], a[hidden]})}};
  }
};

template <> struct Rule<attrs::EmbeddingBwd> : RuleBase<attrs::EmbeddingBwd> {
  using RuleBase::RuleBase;
  // ids [tokens], dout [tokens, hidden] -> dtable [vocab, hidden]
  OperandCounts counts() const {
    return {{a[tokens], product({a[tokens], a[hidden]})},
            {product({a[vocab], a[hidden]})}};
  }
};

/// matmul, matmul_accumulate and matmul_add.
struct MatmulRule : RuleBase<attrs::Matmul> {
  using RuleBase::RuleBase;
  Status check() const { return flags({transpose_a, transpose_b, b_batched}); }
  // a [batch, m, k], b [batch or 1, k, n](, addend [batch, m, n])
  //   -> c [batch, m, n]
  OperandCounts counts() const {
    OperandCounts counts{{product({a[batch], a[m], a[k]}),
                          product({a[b_batched] ? a[batch] : 1, a[k], a[n]})},
                         {product({a[batch], a[m], a[n]})}};
    if (inst.kernel == Kernel::MatmulAdd)
      counts.inputs.push_back(counts.outputs[0]);
    return counts;
  }
  double flops() const {
    return 2.0 * double(a[batch]) * double(a[m]) * double(a[n]) * double(a[k]);
  }
};
template <> struct Rule<attrs::Matmul> : MatmulRule {
  using MatmulRule::MatmulRule;
};
template <> struct Rule<attrs::MatmulAccumulate> : MatmulRule {
  using MatmulRule::MatmulRule;
};
template <> struct Rule<attrs::MatmulAdd> : MatmulRule {
  using MatmulRule::MatmulRule;
};

template <> struct Rule<attrs::MatmulGroup> : RuleBase<attrs::MatmulGroup> {
  using RuleBase::RuleBase;
  Status check() const {
    if (inst.outputs.empty() || inst.inputs.size() != 2 * inst.outputs.size())
      return errorf("takes 2 G inputs (a_1..a_G, b_1..b_G) for G >= 1 "
                    "outputs, got ",
                    inst.inputs.size(), " inputs and ", inst.outputs.size(),
                    " outputs");
    // The products run as one launch: no result may be another's operand.
    for (size_t o = 0; o < inst.outputs.size(); ++o) {
      const uint32_t c = inst.outputs[o];
      if (std::count(inst.inputs.begin(), inst.inputs.end(), c) ||
          std::count(inst.outputs.begin(), inst.outputs.end(), c) > 1)
        return errorf("result ", o,
                      " is also an operand or another result of the group");
    }
    return flags({transpose_a, transpose_b, b_batched, accumulate});
  }
  // a_i [batch, m, k], b_i [batch or 1, k, n] -> c_i [batch, m, n]
  OperandCounts counts() const {
    const size_t groups = inst.outputs.size();
    OperandCounts counts;
    counts.inputs.assign(groups, product({a[batch], a[m], a[k]}));
    counts.inputs.resize(2 * groups,
                         product({a[b_batched] ? a[batch] : 1, a[k], a[n]}));
    counts.outputs.assign(groups, product({a[batch], a[m], a[n]}));
    return counts;
  }
  double flops() const {
    return 2.0 * double(inst.outputs.size()) * double(a[batch]) * double(a[m]) *
           double(a[n]) * double(a[k]);
  }
};

template <> struct Rule<attrs::Amax> : RuleBase<attrs::Amax> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return {{a[n]}, {1}}; } // x -> amax
};

template <> struct Rule<attrs::QuantizeFp8> : RuleBase<attrs::QuantizeFp8> {
  using RuleBase::RuleBase;
  Status check() const {
    if (a[layout] > 2)
      return errorf("layout must be 0 (plain), 1 (transposed) or 2 (both), "
                    "got ints ",
                    formatInts(inst.ints));
    const size_t outputs = a[layout] == 2 ? 3 : 2;
    if (inst.outputs.size() != outputs)
      return errorf("writes ", outputs, " outputs with layout ", a[layout],
                    ", got ", inst.outputs.size());
    return Status::ok();
  }
  // x [rows, cols], amax -> scale_inv, q [rows, cols] or [cols, rows](,
  // q_t [cols, rows])
  OperandCounts counts() const {
    const int64_t x = product({a[rows], a[cols]});
    if (inst.outputs.size() == 3)
      return {{x, 1}, {1, x, x}};
    return {{x, 1}, {1, x}};
  }
};

template <> struct Rule<attrs::MatmulFp8> : RuleBase<attrs::MatmulFp8> {
  using RuleBase::RuleBase;
  Status check() const {
    if (inst.inputs.size() != 4 && inst.inputs.size() != 5)
      return errorf("takes 4 inputs (a, a_scale_inv, b, b_scale_inv) or 5 "
                    "(and an addend), got ",
                    inst.inputs.size());
    if (inst.inputs.size() == 5 && a[accumulate])
      return errorf("accumulates into c and adds an addend: one or the other");
    return flags({accumulate, fast_accumulation});
  }
  // a [m, k], a_scale_inv, b [n, k], b_scale_inv(, addend [m, n]) -> c [m, n]
  OperandCounts counts() const {
    const int64_t c = product({a[m], a[n]});
    OperandCounts counts{{product({a[m], a[k]}), 1, product({a[n], a[k]}), 1},
                         {c}};
    if (inst.inputs.size() == 5)
      counts.inputs.push_back(c);
    return counts;
  }
  double flops() const {
    return 2.0 * double(a[m]) * double(a[n]) * double(a[k]);
  }
};

/// Fails unless an instruction of a kernel with fused amax outputs has one
/// of the output counts `allowed` (Kernels.def lists them).
Status checkOutputCount(const InstructionDesc &inst,
                        std::initializer_list<size_t> allowed) {
  for (size_t count : allowed)
    if (inst.outputs.size() == count)
      return Status::ok();
  std::string counts;
  size_t i = 0;
  for (size_t count : allowed)
    counts += (i++ ? i == allowed.size() ? " or " : ", " : "") +
              std::to_string(count);
  return errorf("writes ", counts, " outputs, got ", inst.outputs.size());
}

/// The element counts of an instruction's outputs: `counts` for the
/// kernel's own, then 1 for each fused amax output.
std::vector<int64_t> withAmaxOutputs(const InstructionDesc &inst,
                                     std::vector<int64_t> counts) {
  counts.resize(counts.size() + fusedAmaxOutputs(inst.kernel,
                                                 inst.outputs.size()),
                1);
  return counts;
}

template <> struct Rule<attrs::RMSNormFwd> : RuleBase<attrs::RMSNormFwd> {
  using RuleBase::RuleBase;
  Status check() const { return checkOutputCount(inst, {1, 2}); }
  // x [rows, dim], w [dim] -> y [rows, dim][, amax]
  OperandCounts counts() const {
    const int64_t x = product({a[rows], a[dim]});
    return {{x, a[dim]}, withAmaxOutputs(inst, {x})};
  }
};

/// rms_norm_bwd and rms_norm_bwd_add.
struct RMSNormBwdRule : RuleBase<attrs::RMSNormBwd> {
  using RuleBase::RuleBase;
  Status check() const { return checkOutputCount(inst, {2, 3}); }
  // dy, x [rows, dim], w [dim](, addend [rows, dim]) -> dx [rows, dim],
  // dw [dim][, amax(dx)]
  OperandCounts counts() const {
    const int64_t x = product({a[rows], a[dim]});
    OperandCounts counts{{x, x, a[dim]}, withAmaxOutputs(inst, {x, a[dim]})};
    if (inst.kernel == Kernel::RMSNormBwdAdd)
      counts.inputs.push_back(x);
    return counts;
  }
};
template <> struct Rule<attrs::RMSNormBwd> : RMSNormBwdRule {
  using RMSNormBwdRule::RMSNormBwdRule;
};
template <> struct Rule<attrs::RMSNormBwdAdd> : RMSNormBwdRule {
  using RMSNormBwdRule::RMSNormBwdRule;
};

/// A rope's or attention's rows of a sequence split over a context axis
/// (`axis` >= 0): the rank's block is two chunks.
template <typename K>
Status checkContextRows(const KernelAttrs<K> &a, int64_t rows) {
  if (a[K::axis] >= 0 && rows % 2 != 0)
    return errorf("seq ", rows,
                  " is a context-parallel rank's block of two chunks and "
                  "must be even");
  return Status::ok();
}

template <> struct Rule<attrs::Rope> : RuleBase<attrs::Rope> {
  using RuleBase::RuleBase;
  Status check() const {
    MLT_RETURN_IF_ERROR(flags({inverse}));
    MLT_RETURN_IF_ERROR(checkContextRows(a, a[seq]));
    return checkRopeScaling(ropeScaling(a));
  }
  // x [batch, seq, heads, head_dim] -> y, the same
  OperandCounts counts() const {
    return all(product({a[batch], a[seq], a[heads], a[head_dim]}), 1, 1);
  }
};

/// attention_fwd, attention_bwd and attention_bwd_rope (K), which name
/// attention's attributes alike.
template <typename K> struct AttentionRule : RuleBase<K> {
  using RuleBase<K>::RuleBase;
  using RuleBase<K>::a;
  Status check() const {
    // (the forward's out and lse, the backward's dq, dk and dv, each with
    // or without their fused amaxes)
    MLT_RETURN_IF_ERROR(K::kernel == Kernel::AttentionFwd
                            ? checkOutputCount(this->inst, {2, 3})
                            : checkOutputCount(this->inst, {3, 6}));
    MLT_RETURN_IF_ERROR(this->flags({K::causal, K::ring}));
    MLT_RETURN_IF_ERROR(checkContextRows(a, a[K::seq]));
    // The ring's blocks: one rank's keys, of the rank ring_step before.
    if (a[K::ring] == 0 && a[K::ring_step] != 0)
      return errorf("ring_step ", a[K::ring_step], " needs ring 1");
    if (a[K::ring] != 0) {
      if (a[K::axis] < 0)
        return errorf("ring 1 needs a context axis");
      if (a[K::ring_step] >= this->groupSize)
        return errorf("ring_step must be below the axis's size ",
                      this->groupSize, ", got ", a[K::ring_step]);
      if (a[K::kv_seq] != a[K::seq])
        return errorf("kv_seq must be seq (", a[K::seq],
                      ": one rank's block of keys) with ring 1, got ",
                      a[K::kv_seq]);
      if constexpr (K::kernel == Kernel::AttentionBwdRope)
        return checkRopeScaling(ropeScaling(a));
      return Status::ok();
    }
    // Keys: the queries' rows, or the whole sequence of G blocks (the
    // queries a rank's block of it, or the whole of it too: the all-to-all
    // exchange's, in 2G chunks).
    const bool context = a[K::axis] >= 0;
    const int64_t keys =
        context ? product({a[K::seq], this->groupSize}) : a[K::seq];
    const bool wholeQueries = context && a[K::kv_seq] == a[K::seq] &&
                              a[K::seq] % product({2, this->groupSize}) == 0;
    if (a[K::kv_seq] != keys && !wholeQueries)
      return errorf("kv_seq must be ", keys,
                    context ? " (seq times the axis's size), or seq where "
                              "2 x the axis's size divides it"
                            : " (seq)",
                    ", got ", a[K::kv_seq]);
    if constexpr (K::kernel == Kernel::AttentionBwdRope)
      return checkRopeScaling(ropeScaling(a));
    return Status::ok();
  }
  // q, out, dout, dq [batch, seq, q_heads, head_dim]; k, v, dk, dv [batch,
  // kv_seq, kv_heads, head_dim]; lse [batch, q_heads, seq]
  OperandCounts counts() const {
    const int64_t q =
        product({a[K::batch], a[K::seq], a[K::q_heads], a[K::head_dim]});
    const int64_t kv =
        product({a[K::batch], a[K::kv_seq], a[K::kv_heads], a[K::head_dim]});
    const int64_t lse = product({a[K::batch], a[K::q_heads], a[K::seq]});
    if constexpr (K::kernel == Kernel::AttentionFwd) // q, k, v -> out, lse
      return {{q, kv, kv}, withAmaxOutputs(this->inst, {q, lse})};
    // dout, q, k, v, out, lse -> dq, dk, dv[, their amaxes]
    return {{q, q, kv, kv, q, lse}, withAmaxOutputs(this->inst, {q, kv, kv})};
  }
  // The forward's two products (scores and the weighted sum of values) over
  // every query and key, half of them under a causal mask (a
  // context-parallel rank's load-balanced block sees half the whole
  // sequence's keys too, and half of a ring step's block: two of the four
  // pairs of chunks, or the diagonal pair's halves, one whole pair and
  // none); the backward's five products are 2.5 times that
  // (the rotation of dq and dk is not counted).
  double flops() const {
    double forward = 4.0 * double(a[K::batch]) * double(a[K::q_heads]) *
                     double(a[K::seq]) * double(a[K::kv_seq]) *
                     double(a[K::head_dim]);
    if (a[K::causal] != 0)
      forward /= 2.0;
    return K::kernel == Kernel::AttentionFwd ? forward : 2.5 * forward;
  }
};
template <>
struct Rule<attrs::AttentionFwd> : AttentionRule<attrs::AttentionFwd> {
  using AttentionRule::AttentionRule;
};
template <>
struct Rule<attrs::AttentionBwd> : AttentionRule<attrs::AttentionBwd> {
  using AttentionRule::AttentionRule;
};
template <>
struct Rule<attrs::AttentionBwdRope> : AttentionRule<attrs::AttentionBwdRope> {
  using AttentionRule::AttentionRule;
};

template <>
struct Rule<attrs::AttentionMerge> : RuleBase<attrs::AttentionMerge> {
  using RuleBase::RuleBase;
  // out_a, lse_a, out_b, lse_b -> out, lse: out [batch, seq, heads,
  // head_dim], lse [batch, heads, seq]
  OperandCounts counts() const {
    const int64_t out = product({a[batch], a[seq], a[heads], a[head_dim]});
    const int64_t lse = product({a[batch], a[heads], a[seq]});
    return {{out, lse, out, lse}, {out, lse}};
  }
};

template <> struct Rule<attrs::SwiGLUFwd> : RuleBase<attrs::SwiGLUFwd> {
  using RuleBase::RuleBase;
  Status check() const { return checkOutputCount(inst, {1, 2}); }
  // gate, up -> y[, amax]
  OperandCounts counts() const {
    return {{a[n], a[n]}, withAmaxOutputs(inst, {a[n]})};
  }
};

template <> struct Rule<attrs::SwiGLUBwd> : RuleBase<attrs::SwiGLUBwd> {
  using RuleBase::RuleBase;
  Status check() const { return checkOutputCount(inst, {2, 3, 4, 6}); }
  // dy, gate, up -> dgate, dup[, y][, their amaxes]
  OperandCounts counts() const {
    const size_t own =
        inst.outputs.size() - fusedAmaxOutputs(inst.kernel, inst.outputs.size());
    return {{a[n], a[n], a[n]},
            withAmaxOutputs(inst, std::vector<int64_t>(own, a[n]))};
  }
};

template <> struct Rule<attrs::SiLUFwd> : RuleBase<attrs::SiLUFwd> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 1, 1); } // x -> y
};

template <> struct Rule<attrs::SiLUBwd> : RuleBase<attrs::SiLUBwd> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 2, 1); } // dy, x -> dx
};

template <> struct Rule<attrs::Add> : RuleBase<attrs::Add> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 2, 1); } // a, b -> y
};

template <> struct Rule<attrs::Mul> : RuleBase<attrs::Mul> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 2, 1); } // a, b -> y
};

template <> struct Rule<attrs::Accumulate> : RuleBase<attrs::Accumulate> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 1, 1); } // x -> y
};

template <> struct Rule<attrs::Transpose> : RuleBase<attrs::Transpose> {
  using RuleBase::RuleBase;
  // rank, then the shape and the permutation, rank values each.
  Status check() const {
    const int64_t r = a[rank];
    // (r is compared before 1 + 2 * r is formed: a rank near 2^63 would
    // overflow it; mlt-fuzz-plan found one)
    const size_t have = inst.ints.size();
    if (r < 0 || uint64_t(r) > (have - 1) / 2 || have != size_t(1 + 2 * r)) {
      if (r >= 0 && r <= int64_t(have))
        return errorf("expects 1 + 2 * rank = ", 1 + 2 * r,
                      " integer attributes for rank ", r, ", has ", have);
      return errorf("expects 1 + 2 * rank integer attributes for rank ", r,
                    ", has ", have);
    }
    const TransposeAttrs dims = transposeAttrs(inst.ints);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < r; ++i)
      if (dims.perm[i] >= r || !seen.insert(dims.perm[i]).second)
        return errorf(
            "perm ", formatInts(std::vector<int64_t>(dims.perm, dims.perm + r)),
            " is not a permutation of 0..", r - 1);
    return Status::ok();
  }
  // x [shape] -> y [shape permuted]
  OperandCounts counts() const {
    const TransposeAttrs dims = transposeAttrs(inst.ints);
    int64_t elements = 1;
    for (int64_t i = 0; i < dims.rank; ++i)
      elements = product({elements, dims.shape[i]});
    return all(elements, 1, 1);
  }
};

template <> struct Rule<attrs::Cast> : RuleBase<attrs::Cast> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 1, 1); } // x -> y
};

template <> struct Rule<attrs::Fill> : RuleBase<attrs::Fill> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 0, 1); } // -> y
};

template <>
struct Rule<attrs::CrossEntropyFwd> : RuleBase<attrs::CrossEntropyFwd> {
  using RuleBase::RuleBase;
  // logits [rows, vocab], labels [rows] -> loss
  OperandCounts counts() const {
    return {{product({a[rows], a[vocab]}), a[rows]}, {1}};
  }
};

template <>
struct Rule<attrs::CrossEntropyBwd> : RuleBase<attrs::CrossEntropyBwd> {
  using RuleBase::RuleBase;
  // dloss, logits [rows, vocab], labels [rows] -> dlogits [rows, vocab]
  OperandCounts counts() const {
    const int64_t logits = product({a[rows], a[vocab]});
    return {{1, logits, a[rows]}, {logits}};
  }
};

template <>
struct Rule<attrs::CrossEntropyFwdBwd> : RuleBase<attrs::CrossEntropyFwdBwd> {
  using RuleBase::RuleBase;
  Status check() const { return positive({row_count}); }
  // dloss, logits [rows, vocab], labels [rows] -> loss, dlogits [rows, vocab]
  OperandCounts counts() const {
    const int64_t logits = product({a[rows], a[vocab]});
    return {{1, logits, a[rows]}, {1, logits}};
  }
};

template <> struct Rule<attrs::SumSquares> : RuleBase<attrs::SumSquares> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return {{a[n]}, {1}}; } // x -> sum
};

template <>
struct Rule<attrs::SumSquaresMulti> : RuleBase<attrs::SumSquaresMulti> {
  using RuleBase::RuleBase;
  // x_t [n_t] -> s_t, for each tensor t
  OperandCounts counts() const {
    OperandCounts counts;
    for (size_t t = 0; t < a.tensors(); ++t)
      counts.inputs.push_back(a(t, n));
    counts.outputs.assign(inst.inputs.size(), 1);
    return counts;
  }
};

template <> struct Rule<attrs::GlobalNorm> : RuleBase<attrs::GlobalNorm> {
  using RuleBase::RuleBase;
  // s_0, s_1, ... -> norm
  OperandCounts counts() const {
    return {std::vector<int64_t>(inst.inputs.size(), 1), {1}};
  }
};

template <>
struct Rule<attrs::ClipCoefficient> : RuleBase<attrs::ClipCoefficient> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(1, 2, 1); } // norm, max -> coef
};

template <> struct Rule<attrs::AdamW> : RuleBase<attrs::AdamW> {
  using RuleBase::RuleBase;
  Status check() const { return flags({decay}); }
  // grad [n], seven scalars -> param, m, v[, copy] [n]
  OperandCounts counts() const {
    OperandCounts counts = all(a[n], 1, inst.outputs.size());
    counts.inputs.resize(1 + kAdamWScalarInputs, 1);
    return counts;
  }
};

template <> struct Rule<attrs::AdamWMulti> : RuleBase<attrs::AdamWMulti> {
  using RuleBase::RuleBase;
  Status check() const {
    for (size_t t = 0; t < tensors(); ++t)
      if (a(t, decay) > 1)
        return errorf("tensor ", t, "'s decay must be 0 or 1, got ints ",
                      formatInts(inst.ints));
    return Status::ok();
  }
  // grad_t [n_t] for each tensor t, seven scalars -> param_t, m_t, v_t[,
  // copy_t] [n_t], outputs grouped by kind
  OperandCounts counts() const {
    OperandCounts counts;
    for (size_t t = 0; t < tensors(); ++t)
      counts.inputs.push_back(a(t, n));
    counts.inputs.resize(inst.inputs.size(), 1);
    for (size_t o = 0; o < inst.outputs.size(); ++o)
      counts.outputs.push_back(a(o % tensors(), n));
    return counts;
  }
  /// K, from the inputs (the plan verifier has checked the ints: 2 K).
  size_t tensors() const { return inst.inputs.size() - kAdamWScalarInputs; }
};

template <>
struct Rule<attrs::EmbeddingFwdVP> : RuleBase<attrs::EmbeddingFwdVP> {
  using RuleBase::RuleBase;
  // ids [tokens], table [vocab_local, hidden] -> out [tokens, hidden]
  OperandCounts counts() const {
    return {{a[tokens], product({a[vocab_local], a[hidden]})},
            {product({a[tokens], a[hidden]})}};
  }
};

template <>
struct Rule<attrs::EmbeddingBwdVP> : RuleBase<attrs::EmbeddingBwdVP> {
  using RuleBase::RuleBase;
  // ids [tokens], dout [tokens, hidden] -> dtable [vocab_local, hidden]
  OperandCounts counts() const {
    return {{a[tokens], product({a[tokens], a[hidden]})},
            {product({a[vocab_local], a[hidden]})}};
  }
};

template <>
struct Rule<attrs::CrossEntropyStats> : RuleBase<attrs::CrossEntropyStats> {
  using RuleBase::RuleBase;
  // logits [rows, vocab_local], labels [rows] -> lse [rows], target [rows]
  OperandCounts counts() const {
    return {{product({a[rows], a[vocab_local]}), a[rows]}, {a[rows], a[rows]}};
  }
};

template <>
struct Rule<attrs::CrossEntropyCombine> : RuleBase<attrs::CrossEntropyCombine> {
  using RuleBase::RuleBase;
  Status check() const { return positive({num_parts, row_count}); }
  // parts [num_parts, rows], target [rows] -> lse [rows], loss
  OperandCounts counts() const {
    return {{product({a[num_parts], a[rows]}), a[rows]}, {a[rows], 1}};
  }
};

template <>
struct Rule<attrs::CrossEntropyBwdStats>
    : RuleBase<attrs::CrossEntropyBwdStats> {
  using RuleBase::RuleBase;
  Status check() const { return positive({row_count}); }
  // dloss, logits [rows, vocab_local], labels [rows], lse [rows]
  //   -> dlogits [rows, vocab_local]
  OperandCounts counts() const {
    const int64_t logits = product({a[rows], a[vocab_local]});
    return {{1, logits, a[rows], a[rows]}, {logits}};
  }
};

template <>
struct Rule<attrs::ReorderSequence> : RuleBase<attrs::ReorderSequence> {
  using RuleBase::RuleBase;
  Status check() const {
    MLT_RETURN_IF_ERROR(positive({ranks}));
    return flags({to_natural});
  }
  // x [outer, 2 * ranks * chunk, inner] -> y, the same
  OperandCounts counts() const {
    return all(product({a[outer], 2, a[ranks], a[chunk], a[inner]}), 1, 1);
  }
};

template <> struct Rule<attrs::ShardSlice> : RuleBase<attrs::ShardSlice> {
  using RuleBase::RuleBase;
  // x [outer, G * n, inner] -> y [outer, n, inner]
  OperandCounts counts() const {
    return {{product({a[outer], groupSize, a[n], a[inner]})},
            {product({a[outer], a[n], a[inner]})}};
  }
};

template <> struct Rule<attrs::AllReduceSum> : RuleBase<attrs::AllReduceSum> {
  using RuleBase::RuleBase;
  OperandCounts counts() const { return all(a[n], 1, 1); } // x [n] -> y [n]
};

template <>
struct Rule<attrs::ReduceScatterSum> : RuleBase<attrs::ReduceScatterSum> {
  using RuleBase::RuleBase;
  // x [G * n_out] -> y [n_out]
  OperandCounts counts() const {
    return {{product({a[n_out], groupSize})}, {a[n_out]}};
  }
};

template <> struct Rule<attrs::AllGather> : RuleBase<attrs::AllGather> {
  using RuleBase::RuleBase;
  // x [n_in] -> y [G * n_in]
  OperandCounts counts() const {
    return {{a[n_in]}, {product({a[n_in], groupSize})}};
  }
};

template <> struct Rule<attrs::AllToAll> : RuleBase<attrs::AllToAll> {
  using RuleBase::RuleBase;
  Status check() const {
    if (a[order] < 0 || a[order] > int64_t(BlockOrder::FromNatural))
      return errorf("order must be 0 (blocks), 1 (to_natural) or 2 "
                    "(from_natural), got ",
                    a[order]);
    if (a[order] != 0 && a[n] % 2 != 0)
      return errorf("a block of n = ", a[n],
                    " elements does not split into the two chunks of order ",
                    blockOrderName(BlockOrder(a[order])));
    return Status::ok();
  }
  // x [G * n] -> y [G * n]
  OperandCounts counts() const {
    return all(product({a[n], groupSize}), 1, 1);
  }
};

template <>
struct Rule<attrs::CollectivePermute> : RuleBase<attrs::CollectivePermute> {
  using RuleBase::RuleBase;
  Status check() const {
    if (a[shift] <= 0 || a[shift] >= groupSize)
      return errorf("shift must be in [1, ", groupSize,
                    ") (a step along the group of ", groupSize,
                    " ranks), got ", a[shift]);
    return Status::ok();
  }
  OperandCounts counts() const { return all(a[n], 1, 1); } // x [n] -> y [n]
};

/// send and recv: one operand of n elements, the input of a send, the
/// output of a receive.
struct TransferRule : RuleBase<attrs::Send> {
  using RuleBase::RuleBase;
  Status check() const {
    if (a[shift] == 0)
      return errorf("shift must not be 0 (a rank does not send to itself), "
                    "got ints ",
                    formatInts(inst.ints));
    return Status::ok();
  }
  OperandCounts counts() const {
    return inst.kernel == Kernel::Send ? all(a[n], 1, 0) : all(a[n], 0, 1);
  }
};
template <> struct Rule<attrs::Send> : TransferRule {
  using TransferRule::TransferRule;
};
template <> struct Rule<attrs::Recv> : TransferRule {
  using TransferRule::TransferRule;
};

template <typename K>
StatusOr<OperandCounts> countsOf(const InstructionDesc &inst,
                                 int64_t groupSize) {
  const Rule<K> rule(inst, groupSize);
  MLT_RETURN_IF_ERROR(rule.check());
  return rule.counts();
}

template <typename K> double flopsOf(const InstructionDesc &inst) {
  return Rule<K>(inst, 1).flops();
}

/// Every kernel's rule, in the order of the Kernel enum.
struct RuleEntry {
  StatusOr<OperandCounts> (*counts)(const InstructionDesc &, int64_t);
  double (*flops)(const InstructionDesc &);
};
constexpr RuleEntry kRules[] = {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats)                  \
  {&countsOf<attrs::Enum>, &flopsOf<attrs::Enum>},
#include "mlt/Plan/Kernels.def"
};
static_assert(std::size(kRules) == numKernels());

} // namespace

StatusOr<OperandCounts> mlt::rt::operandCounts(const InstructionDesc &inst,
                                               int64_t groupSize) {
  return kRules[size_t(inst.kernel)].counts(inst, groupSize);
}

double mlt::rt::kernelFlops(const InstructionDesc &inst) {
  return kRules[size_t(inst.kernel)].flops(inst);
}

//===----------------------------------------------------------------------===//
// Kernel families, operands and in-place outputs
//===----------------------------------------------------------------------===//

CollectiveAttrs mlt::rt::collectiveAttrs(const InstructionDesc &inst) {
  switch (inst.kernel) {
  case Kernel::ReduceScatterSum: {
    using A = attrs::ReduceScatterSum;
    const KernelAttrs<A> a(inst);
    return {a[A::n_out], a[A::axis]};
  }
  case Kernel::AllGather: {
    using A = attrs::AllGather;
    const KernelAttrs<A> a(inst);
    return {a[A::n_in], a[A::axis]};
  }
  case Kernel::AllToAll: {
    using A = attrs::AllToAll;
    const KernelAttrs<A> a(inst);
    return {a[A::n], a[A::axis], 0, a[A::order]};
  }
  case Kernel::CollectivePermute: {
    using A = attrs::CollectivePermute;
    const KernelAttrs<A> a(inst);
    return {a[A::n], a[A::axis], a[A::shift]};
  }
  default: {
    assert(inst.kernel == Kernel::AllReduceSum && "not a collective");
    using A = attrs::AllReduceSum;
    const KernelAttrs<A> a(inst);
    return {a[A::n], a[A::axis]};
  }
  }
}

std::vector<int64_t> mlt::rt::collectiveInts(Kernel kernel,
                                             CollectiveAttrs collective) {
  switch (kernel) {
  case Kernel::ReduceScatterSum: {
    using A = attrs::ReduceScatterSum;
    return kernelInts<A>(
        {{A::n_out, collective.count}, {A::axis, collective.axis}});
  }
  case Kernel::AllGather: {
    using A = attrs::AllGather;
    return kernelInts<A>(
        {{A::n_in, collective.count}, {A::axis, collective.axis}});
  }
  case Kernel::AllToAll: {
    using A = attrs::AllToAll;
    return kernelInts<A>({{A::n, collective.count},
                          {A::axis, collective.axis},
                          {A::order, collective.order}});
  }
  case Kernel::CollectivePermute: {
    using A = attrs::CollectivePermute;
    return kernelInts<A>({{A::n, collective.count},
                          {A::axis, collective.axis},
                          {A::shift, collective.shift}});
  }
  default: {
    assert(kernel == Kernel::AllReduceSum && "not a collective");
    using A = attrs::AllReduceSum;
    return kernelInts<A>(
        {{A::n, collective.count}, {A::axis, collective.axis}});
  }
  }
}

CollectiveKind mlt::rt::collectiveKind(Kernel kernel) {
  switch (kernel) {
  case Kernel::ReduceScatterSum:
    return CollectiveKind::ReduceScatterSum;
  case Kernel::AllGather:
    return CollectiveKind::AllGather;
  case Kernel::AllToAll:
    return CollectiveKind::AllToAll;
  case Kernel::CollectivePermute:
    return CollectiveKind::Permute;
  default:
    assert(kernel == Kernel::AllReduceSum && "not a collective");
    return CollectiveKind::AllReduceSum;
  }
}

CollectiveCall mlt::rt::collectiveCall(const InstructionDesc &inst,
                                       ElementType dtype) {
  const CollectiveAttrs collective = collectiveAttrs(inst);
  CollectiveCall call;
  call.kind = collectiveKind(inst.kernel);
  call.dtype = dtype;
  call.count = size_t(collective.count);
  call.shift = int(collective.shift);
  call.order = BlockOrder(collective.order);
  return call;
}

TransferAttrs mlt::rt::transferAttrs(const InstructionDesc &inst) {
  assert(isTransferKernel(inst.kernel) && "not a transfer");
  using A = attrs::Send; // recv names its attributes alike
  const KernelAttrs<A> a(inst);
  return {a[A::n], a[A::axis], a[A::shift]};
}

std::vector<int64_t> mlt::rt::transferInts(Kernel kernel,
                                           TransferAttrs transfer) {
  assert(isTransferKernel(kernel) && "not a transfer");
  static_assert(sameAttributes(Kernel::Send, Kernel::Recv));
  (void)kernel;
  using A = attrs::Send;
  return kernelInts<A>({{A::n, transfer.count},
                        {A::axis, transfer.axis},
                        {A::shift, transfer.shift}});
}

bool mlt::rt::isIdOperand(Kernel kernel, size_t operand) {
  switch (kernel) {
  case Kernel::EmbeddingFwd: // ids, table -> out
  case Kernel::EmbeddingBwd: // ids, dout -> dtable
  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP:
    return operand == 0;
  case Kernel::CrossEntropyFwd:   // logits, labels -> loss
  case Kernel::CrossEntropyStats: // logits, labels -> lse, target
    return operand == 1;
  case Kernel::CrossEntropyBwd:      // dloss, logits, labels -> dlogits
  case Kernel::CrossEntropyBwdStats: // dloss, logits, labels, lse -> dlogits
  case Kernel::CrossEntropyFwdBwd:   // dloss, logits, labels -> loss, dlogits
    return operand == 2;
  default:
    return false;
  }
}

size_t mlt::rt::fusedAmaxOutputs(Kernel kernel, size_t numOutputs) {
  switch (kernel) {
  case Kernel::RMSNormFwd: // y[, amax]
  case Kernel::SwiGLUFwd:
    return numOutputs == 2 ? 1 : 0;
  case Kernel::RMSNormBwd: // dx, dw[, amax(dx)]
  case Kernel::RMSNormBwdAdd:
    return numOutputs == 3 ? 1 : 0;
  case Kernel::SwiGLUBwd: // dgate, dup[, y][, their amaxes]
    return numOutputs == 4 ? 2 : numOutputs == 6 ? 3 : 0;
  case Kernel::AttentionFwd: // out, lse[, amax(out)]
    return numOutputs == 3 ? 1 : 0;
  case Kernel::AttentionBwd: // dq, dk, dv[, their amaxes]
  case Kernel::AttentionBwdRope:
    return numOutputs == 6 ? 3 : 0;
  default:
    return 0;
  }
}

bool mlt::rt::isFixedF32Scalar(Kernel kernel, size_t numInputs,
                               size_t numOutputs, size_t operand) {
  if (operand >= numInputs + numOutputs - fusedAmaxOutputs(kernel, numOutputs))
    return true;
  switch (kernel) {
  case Kernel::SumSquares:
    return operand == numInputs; // the sum, not the tensor
  case Kernel::SumSquaresMulti:
    return operand >= numInputs; // the sums
  case Kernel::GlobalNorm:
  case Kernel::ClipCoefficient:
    return true;
  case Kernel::Amax: // x -> amax
    return operand == 1;
  case Kernel::QuantizeFp8: // x, amax -> scale_inv, q[, q_t]
    return operand == 1 || operand == numInputs;
  case Kernel::MatmulFp8: // a, a_scale_inv, b, b_scale_inv[, addend] -> c
    return operand == 1 || operand == 3;
  case Kernel::AdamW:
    return operand >= 1 && operand < numInputs; // grad_scale, hyper-parameters
  case Kernel::AdamWMulti: // grads, then grad_scale and hyper-parameters
    return operand + kAdamWScalarInputs >= numInputs && operand < numInputs;
  default:
    return false;
  }
}

bool mlt::rt::isFp8Operand(Kernel kernel, size_t numInputs, size_t operand) {
  switch (kernel) {
  case Kernel::QuantizeFp8: // x, amax -> scale_inv, q[, q_t]
    return operand > numInputs;
  case Kernel::MatmulFp8: // a, a_scale_inv, b, b_scale_inv[, addend] -> c
    return operand == 0 || operand == 2;
  default:
    return false;
  }
}

bool mlt::rt::mayAlias(Kernel kernel, size_t numOutputs, size_t output,
                       size_t input) {
  const KernelSignature &signature = kernelSignature(kernel);
  if ((signature.outputs >= 0 && output >= size_t(signature.outputs)) ||
      output >= numOutputs - fusedAmaxOutputs(kernel, numOutputs) ||
      (signature.inputs >= 0 && input >= size_t(signature.inputs)))
    return false;
  switch (kernel) {
  // Maps: each element of every output is computed from the same element of
  // the inputs, all read before any is written.
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::SwiGLUFwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd:
    return true;
  case Kernel::SwiGLUBwd: // dgate, dup[, y]: any over any input
    return output < 3;
  // Rope: a pair's halves are read before either is written. RMSNorm: a
  // row is read before it is written (dx over dy in the backward). The
  // communicator sums in place.
  case Kernel::Rope:         // x -> y
  case Kernel::RMSNormFwd:   // x, w -> y
  case Kernel::RMSNormBwd:   // dy, x, w -> dx, dw
  case Kernel::AllReduceSum: // x -> y
    return output == 0 && input == 0;
  case Kernel::RMSNormBwdAdd: // dy, x, w, addend -> dx, dw
    return output == 0 && (input == 0 || input == 3);
  case Kernel::CrossEntropyBwd:      // dloss, logits, labels -> dlogits
  case Kernel::CrossEntropyBwdStats: // dloss, logits, labels, lse -> dlogits
    return output == 0 && input == 1;
  case Kernel::CrossEntropyFwdBwd: // dloss, logits, labels -> loss, dlogits
    return output == 1 && input == 1;
  case Kernel::MatmulAdd: // a, b, addend -> c: the epilogue adds c = addend
    return output == 0 && input == 2;
  case Kernel::AttentionMerge: // out_a, lse_a, out_b, lse_b -> out, lse
    return (output == 0 && input == 0) || (output == 1 && input == 1);
  case Kernel::MatmulFp8: // ..., addend -> c: as matmul_add
    return output == 0 && input == 4;
  default:
    return false;
  }
}

bool mlt::rt::placesInPlace(Kernel kernel, size_t numOutputs, size_t output,
                            size_t input) {
  return mayAlias(kernel, numOutputs, output, input) &&
         kernel != Kernel::MatmulAdd &&
         kernel != Kernel::MatmulFp8;
}

OperandPrecision mlt::rt::operandPrecision(Kernel kernel, size_t numInputs,
                                           size_t numOutputs, size_t operand) {
  if (isFixedF32Scalar(kernel, numInputs, numOutputs, operand))
    return OperandPrecision::FixedF32;
  const bool output = operand >= numInputs;
  const size_t index = output ? operand - numInputs : operand;
  switch (kernel) {
  case Kernel::AttentionFwd: // q, k, v -> out, lse
    return output && index == 1 ? OperandPrecision::Statistic
                                : OperandPrecision::Compute;
  case Kernel::AttentionBwd:     // dout, q, k, v, out, lse -> dq, dk, dv
  case Kernel::AttentionBwdRope: // the same
    return !output && index == 5 ? OperandPrecision::Statistic
                                 : OperandPrecision::Compute;
  case Kernel::AttentionMerge: // out_a, lse_a, out_b, lse_b -> out, lse
    return index % 2 == 1 ? OperandPrecision::Statistic
                          : OperandPrecision::Compute;
  case Kernel::CrossEntropyFwd:   // logits, labels -> loss
  case Kernel::CrossEntropyStats: // logits, labels -> lse, target
    return output ? OperandPrecision::Statistic : OperandPrecision::Compute;
  case Kernel::CrossEntropyBwd: // dloss, logits, labels -> dlogits
    return !output && index == 0 ? OperandPrecision::Statistic
                                 : OperandPrecision::Compute;
  case Kernel::CrossEntropyFwdBwd: // dloss, logits, labels -> loss, dlogits
    return index == 0 ? OperandPrecision::Statistic : OperandPrecision::Compute;
  case Kernel::CrossEntropyCombine: // parts, target -> lse, loss
    return OperandPrecision::Statistic;
  case Kernel::CrossEntropyBwdStats: // dloss, logits, labels, lse -> dlogits
    return !output && (index == 0 || index == 3) ? OperandPrecision::Statistic
                                                 : OperandPrecision::Compute;
  case Kernel::Matmul: // a, b -> c
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulGroup:  // a_i, b_i -> c_i
  case Kernel::EmbeddingBwd: // ids, dout -> dtable
  case Kernel::EmbeddingBwdVP:
  case Kernel::Accumulate: // x -> y
    return output ? OperandPrecision::Accumulator : OperandPrecision::Compute;
  case Kernel::RMSNormBwd:    // dy, x, w -> dx, dw
  case Kernel::RMSNormBwdAdd: // dy, x, w, addend -> dx, dw
    return output && index == 1 ? OperandPrecision::Accumulator
                                : OperandPrecision::Compute;
  case Kernel::AdamW: // grad -> param, m, v[, copy]
    return output && index == 3 ? OperandPrecision::ComputeCopy
                                : OperandPrecision::Compute;
  case Kernel::SumSquaresMulti: // grads -> sums (fixed f32, above)
    return OperandPrecision::Gradient;
  case Kernel::AdamWMulti: // grads -> params, ms, vs[, copies]
    if (!output)
      return OperandPrecision::Gradient; // the scalars are fixed f32, above
    return numInputs >= kAdamWScalarInputs &&
                   index >= 3 * (numInputs - kAdamWScalarInputs)
               ? OperandPrecision::ComputeCopy
               : OperandPrecision::Compute;
  default:
    return OperandPrecision::Compute;
  }
}

ElementType mlt::rt::precisionType(OperandPrecision precision,
                                   ElementType compute) {
  switch (precision) {
  case OperandPrecision::Compute:
    return compute;
  case OperandPrecision::FixedF32:
    return ElementType::F32;
  case OperandPrecision::Statistic:
    return compute == ElementType::F64 ? ElementType::F64 : ElementType::F32;
  case OperandPrecision::Accumulator:
    return compute == ElementType::BF16 || compute == ElementType::F16
               ? ElementType::F32
               : compute;
  case OperandPrecision::ComputeCopy:
    return ElementType::BF16;
  case OperandPrecision::Gradient:
    return compute;
  }
  return compute;
}

std::optional<size_t>
mlt::rt::computeOperandIndex(Kernel kernel, size_t numInputs,
                             const std::vector<ElementType> &operandTypes) {
  const size_t numOutputs = operandTypes.size() - numInputs;
  for (size_t o = 0; o < operandTypes.size(); ++o)
    if (isFloatElementType(operandTypes[o]) &&
        operandPrecision(kernel, numInputs, numOutputs, o) ==
            OperandPrecision::Compute)
      return o;
  for (size_t o = 0; o < operandTypes.size(); ++o) {
    const ElementType type = operandTypes[o];
    const OperandPrecision precision =
        operandPrecision(kernel, numInputs, numOutputs, o);
    const bool half = type == ElementType::BF16 || type == ElementType::F16;
    if (isFloatElementType(type) && precision != OperandPrecision::FixedF32 &&
        precision != OperandPrecision::ComputeCopy &&
        !(precision == OperandPrecision::Gradient && half))
      return o;
  }
  return std::nullopt;
}
