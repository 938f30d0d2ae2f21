//===- Attention.cpp - CPU causal grouped-query attention -----------------===//
//
// Part of mlt. Attention forward and backward, one query row at a time.
//
// Forward, per (batch, query head h, query position i), with kv head
// g = h / (qHeads / kvHeads):
//   1. s_j = scale * q_i . k_j for the visible j (j <= i when causal);
//   2. p_j = exp(s_j - max s), sum = sum_j p_j, lse_i = max s + log(sum);
//   3. out_i = sum_j p_j v_j / sum.
// Backward (flash attention 2's), per kv head so that dk/dv of the group can
// be summed in one accumulator:
//   1. delta_i = dout_i . out_i;
//   2. p_ij = exp(scale * q_i . k_j - lse_i) (recomputed);
//   3. dv_j += p_ij dout_i; dp_ij = dout_i . v_j;
//      ds_ij = p_ij (dp_ij - delta_i);
//   4. dq_i += scale ds_ij k_j; dk_j += scale ds_ij q_i.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

using namespace mlt;
using namespace mlt::cpu;

Status mlt::cpu::checkAttentionParams(const char *kernel,
                                      const AttentionParams &p) {
  if (p.batch <= 0 || p.seq <= 0 || p.keyRows() <= 0 || p.qHeads <= 0 ||
      p.kvHeads <= 0 || p.headDim <= 0)
    return errorf(kernel, ": sizes must be positive (batch ", p.batch, ", seq ",
                  p.seq, ", kv seq ", p.keyRows(), ", q heads ", p.qHeads,
                  ", kv heads ", p.kvHeads, ", head_dim ", p.headDim, ")");
  if (p.qHeads % p.kvHeads != 0)
    return errorf(kernel, ": ", p.qHeads, " query heads are not a multiple of ",
                  p.kvHeads, " key/value heads");
  return Status::ok();
}

namespace {

/// a . b over `n` elements, accumulated in double.
template <typename T> double dot(const T *a, const T *b, int64_t n) {
  double sum = 0.0;
  for (int64_t d = 0; d < n; ++d)
    sum += double(a[d]) * double(b[d]);
  return sum;
}

/// The key rows in order of position, and how many of them a query at each
/// position sees: the keys are visited in this order, so that a sequence
/// split over ranks sums as the whole one does.
struct KeyOrder {
  std::vector<int64_t> rows, positions;

  explicit KeyOrder(const AttentionParams &p) {
    const int64_t n = p.keyRows();
    rows.resize(n);
    for (int64_t j = 0; j < n; ++j)
      rows[j] = j;
    std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
      return p.keys(a) < p.keys(b);
    });
    for (int64_t j : rows)
      positions.push_back(p.keys(j));
  }
  /// The keys that query row i sees: the first visible(i) of `rows`.
  int64_t visible(const AttentionParams &p, int64_t i) const {
    if (!p.causal)
      return int64_t(rows.size());
    return std::upper_bound(positions.begin(), positions.end(), p.queries(i)) -
           positions.begin();
  }
};

/// Strides of the [batch, seq, heads, headDim] layout.
struct HeadLayout {
  int64_t seq, heads, headDim;
  int64_t offset(int64_t b, int64_t s, int64_t h) const {
    return ((b * seq + s) * heads + h) * headDim;
  }
};

} // namespace

template <typename T>
Status mlt::cpu::attentionForward(T *out, T *lse, const T *q, const T *k,
                                  const T *v, const AttentionParams &params) {
  MLT_RETURN_IF_ERROR(checkAttentionParams("attention", params));
  const int64_t seq = params.seq, dim = params.headDim;
  const int64_t group = params.qHeads / params.kvHeads;
  const HeadLayout qLayout{seq, params.qHeads, dim};
  const HeadLayout kvLayout{params.keyRows(), params.kvHeads, dim};
  const KeyOrder order(params);
  std::vector<double> scores(params.keyRows()), acc(dim);
  for (int64_t b = 0; b < params.batch; ++b) {
    for (int64_t h = 0; h < params.qHeads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < seq; ++i) {
        const T *qi = q + qLayout.offset(b, i, h);
        const int64_t visible = order.visible(params, i);
        double maxScore = -std::numeric_limits<double>::infinity();
        for (int64_t t = 0; t < visible; ++t) {
          scores[t] = params.scale *
                      dot(qi, k + kvLayout.offset(b, order.rows[t], g), dim);
          maxScore = std::max(maxScore, scores[t]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = 0; t < visible; ++t) {
          const double p = std::exp(scores[t] - maxScore);
          sum += p;
          const T *vj = v + kvLayout.offset(b, order.rows[t], g);
          for (int64_t d = 0; d < dim; ++d)
            acc[d] += p * double(vj[d]);
        }
        T *oi = out + qLayout.offset(b, i, h);
        if (visible == 0) { // no key (a ring step's): nothing to average
          std::fill(oi, oi + dim, T(0));
          lse[(b * params.qHeads + h) * seq + i] =
              T(-std::numeric_limits<double>::infinity());
          continue;
        }
        for (int64_t d = 0; d < dim; ++d)
          oi[d] = T(acc[d] / sum);
        lse[(b * params.qHeads + h) * seq + i] = T(maxScore + std::log(sum));
      }
    }
  }
  return Status::ok();
}

template <typename T>
Status mlt::cpu::attentionBackward(T *dq, T *dk, T *dv, const T *dout,
                                   const T *q, const T *k, const T *v,
                                   const T *out, const T *lse,
                                   const AttentionParams &params) {
  MLT_RETURN_IF_ERROR(checkAttentionParams("attention backward", params));
  const int64_t seq = params.seq, kvSeq = params.keyRows(),
                dim = params.headDim;
  const int64_t group = params.qHeads / params.kvHeads;
  const HeadLayout qLayout{seq, params.qHeads, dim};
  const HeadLayout kvLayout{kvSeq, params.kvHeads, dim};
  const KeyOrder order(params);
  // dk/dv of one kv head gather contributions from every query row of every
  // query head in its group; they are summed here and written once.
  std::vector<double> dkAcc(kvSeq * dim), dvAcc(kvSeq * dim), dqAcc(dim);
  for (int64_t b = 0; b < params.batch; ++b) {
    for (int64_t g = 0; g < params.kvHeads; ++g) {
      std::fill(dkAcc.begin(), dkAcc.end(), 0.0);
      std::fill(dvAcc.begin(), dvAcc.end(), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t i = 0; i < seq; ++i) {
          const int64_t qOffset = qLayout.offset(b, i, h);
          const T *qi = q + qOffset;
          const T *doi = dout + qOffset;
          const double delta = dot(doi, out + qOffset, dim);
          const double lsei = double(lse[(b * params.qHeads + h) * seq + i]);
          std::fill(dqAcc.begin(), dqAcc.end(), 0.0);
          const int64_t visible = order.visible(params, i);
          for (int64_t t = 0; t < visible; ++t) {
            const int64_t j = order.rows[t];
            const T *kj = k + kvLayout.offset(b, j, g);
            const T *vj = v + kvLayout.offset(b, j, g);
            const double p = std::exp(params.scale * dot(qi, kj, dim) - lsei);
            const double ds = p * (dot(doi, vj, dim) - delta);
            double *dkj = dkAcc.data() + j * dim;
            double *dvj = dvAcc.data() + j * dim;
            for (int64_t d = 0; d < dim; ++d) {
              dvj[d] += p * double(doi[d]);
              dqAcc[d] += ds * double(kj[d]);
              dkj[d] += ds * double(qi[d]);
            }
          }
          T *dqi = dq + qOffset;
          for (int64_t d = 0; d < dim; ++d)
            dqi[d] = T(params.scale * dqAcc[d]);
        }
      }
      for (int64_t j = 0; j < kvSeq; ++j) {
        T *dkj = dk + kvLayout.offset(b, j, g);
        T *dvj = dv + kvLayout.offset(b, j, g);
        for (int64_t d = 0; d < dim; ++d) {
          dkj[d] = T(params.scale * dkAcc[j * dim + d]);
          dvj[d] = T(dvAcc[j * dim + d]);
        }
      }
    }
  }
  return Status::ok();
}

template <typename T>
void mlt::cpu::attentionMerge(T *out, T *lse, const T *outA, const T *lseA,
                              const T *outB, const T *lseB, int64_t batch,
                              int64_t seq, int64_t heads, int64_t headDim) {
  const double none = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t stat = (b * heads + h) * seq + i;
        const int64_t row = ((b * seq + i) * heads + h) * headDim;
        const double la = double(lseA[stat]), lb = double(lseB[stat]);
        double wa = 0.0, wb = 0.0, merged = none;
        if (la != none || lb != none) {
          const double top = std::max(la, lb);
          const double ea = std::exp(la - top), eb = std::exp(lb - top);
          merged = top + std::log(ea + eb);
          wa = ea / (ea + eb);
          wb = eb / (ea + eb);
        }
        for (int64_t d = 0; d < headDim; ++d)
          out[row + d] =
              T(wa * double(outA[row + d]) + wb * double(outB[row + d]));
        lse[stat] = T(merged);
      }
}

#define MLT_INSTANTIATE_ATTENTION(T)                                           \
  template Status mlt::cpu::attentionForward<T>(                               \
      T *, T *, const T *, const T *, const T *, const AttentionParams &);     \
  template Status mlt::cpu::attentionBackward<T>(                              \
      T *, T *, T *, const T *, const T *, const T *, const T *, const T *,    \
      const T *, const AttentionParams &);                                     \
  template void mlt::cpu::attentionMerge<T>(T *, T *, const T *, const T *,   \
                                            const T *, const T *, int64_t,     \
                                            int64_t, int64_t, int64_t);
MLT_INSTANTIATE_ATTENTION(float)
MLT_INSTANTIATE_ATTENTION(double)
