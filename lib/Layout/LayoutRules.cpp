//===- LayoutRules.cpp - the rule book of layouts -------------------------===//
//
// Part of mlt. See LayoutRules.h. Each rule is a row of kRules: its name,
// statement and reason, and the check that finds a violation of it. The
// checks name options by their layout names ("tp 4", "zero 2") so that the
// message reads the same whether the option came from mlt-run's flags or
// mlt-opt's pipeline options.
//
//===----------------------------------------------------------------------===//

#include "mlt/Layout/LayoutRules.h"
#include "mlt/Layout/LayoutOptions.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>

using namespace mlt;

namespace {

/// What a check sees.
struct Subject {
  const Layout &layout;
  const ModelShape &model;
  const StepShape &step;
  bool hasModel() const { return model.layers > 0; }
  bool hasBatch() const { return step.batch > 0; }
  bool hasSeqLen() const { return step.seqLen > 0; }
};

/// A check: the violation's message, or nothing.
using Check = std::function<std::optional<std::string>(const Subject &)>;

template <typename... Parts> std::string str(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

/// "1 micro-batch", "4 micro-batches".
std::string count(int64_t n, const char *one, const char *many) {
  return str(n, " ", n == 1 ? one : many);
}

/// "tp 4 does not divide the model's 6 attention heads", where tp > 1 and
/// it does not.
std::optional<std::string> tpDivides(const Subject &s, int64_t size,
                                     const char *what) {
  if (!s.hasModel() || s.layout.tp <= 1 || size % s.layout.tp == 0)
    return std::nullopt;
  return str("tp ", s.layout.tp, " does not divide the model's ", size, " ",
             what);
}

struct RuleRow {
  LayoutRule rule;
  Check check;
};

const std::vector<RuleRow> &rows() {
  static const std::vector<RuleRow> table = {
      //===--- The layout alone ------------------------------------------===//
      {{"sequence-parallel-needs-tp", "sequence parallelism needs tp 2 or more",
        "it splits the sequence over the tensor-parallel ranks"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.sequenceParallel && s.layout.tp < 2)
           return std::string("sequence-parallel splits the sequence over "
                              "the tensor-parallel ranks and needs tp 2 or "
                              "more");
         return std::nullopt;
       }},
      {{"cp-comm-needs-cp", "cp-comm a2a or ring needs cp 2 or more",
        "it exchanges the blocks of a sequence split over cp"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.cpComm != ContextExchange::AllGather && s.layout.cp < 2)
           return str("cp-comm ", contextExchangeName(s.layout.cpComm),
                      " exchanges the blocks of a sequence split over cp "
                      "and needs cp 2 or more");
         return std::nullopt;
       }},
      {{"vp-needs-pp", "vp 2 or more needs pp 2 or more",
        "virtual stages interleave model chunks over pipeline stages"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.vp > 1 && s.layout.pp < 2)
           return str("vp ", s.layout.vp,
                      " interleaves model chunks over pipeline stages and "
                      "needs pp 2 or more");
         return std::nullopt;
       }},
      {{"schedule-fits-chunks",
        "the schedule runs as many model chunks per stage as vp gives",
        "interleaved runs stages of several chunks, the others one"},
       [](const Subject &s) -> std::optional<std::string> {
         const ScheduleTraits &traits = traitsOf(s.layout.scheduleKind());
         if (traits.severalChunks && s.layout.vp < 2)
           return str("schedule ", traits.name,
                      " runs stages of several model chunks and needs vp 2 "
                      "or more (and pp 2 or more)");
         if (!traits.severalChunks && s.layout.vp > 1)
           return str("schedule ", traits.name, " with vp ", s.layout.vp,
                      ": stages of several model chunks run the interleaved "
                      "schedule (the default with vp)");
         return std::nullopt;
       }},
      {{"group-size-needs-schedule",
        "pp-group-size is given only to a schedule that takes a group size",
        "only the interleaved schedule runs groups of micro-batches per "
        "chunk"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.ppGroupSize &&
             !traitsOf(s.layout.scheduleKind()).takesGroupSize)
           return str("pp-group-size sets the interleaved schedule's "
                      "micro-batches per chunk; schedule ",
                      scheduleKindName(s.layout.scheduleKind()), " takes none");
         return std::nullopt;
       }},
      {{"interleaved-groups",
        "the interleaved schedule's group (pp-group-size, default pp) is "
        "between pp and the micro-batches, and its last group empty or at "
        "least pp",
        "a shorter group stalls the pipeline"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (!traitsOf(l.scheduleKind()).takesGroupSize || l.pp < 2 || l.vp < 2)
           return std::nullopt;
         const int64_t group = l.ppGroupSize ? l.ppGroupSize : l.pp;
         if (group < l.pp || group > l.microbatches)
           return str("the interleaved schedule runs ", group,
                      " micro-batches a chunk in a row (pp-group-size, "
                      "default pp), which must be at least pp ",
                      l.pp, " and at most the ",
                      count(l.microbatches, "micro-batch", "micro-batches"));
         const int64_t last = l.microbatches % group;
         if (last > 0 && last < l.pp)
           return str("the interleaved schedule's last group of "
                      "micro-batches (",
                      l.microbatches, " % ", group, " = ", last,
                      ") must be empty or at least pp ", l.pp,
                      ": a shorter one stalls the pipeline");
         return std::nullopt;
       }},
      {{"pp-layers-per-stage",
        "pp-layers gives one count per stage (per virtual stage with vp)",
        "each count is a stage's layers"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (l.ppLayers.empty() || int64_t(l.ppLayers.size()) == l.pp * l.vp)
           return std::nullopt;
         if (l.vp > 1)
           return str("pp-layers gives ",
                      count(int64_t(l.ppLayers.size()), "virtual stage",
                            "virtual stages"),
                      ", pp ", l.pp, " x vp ", l.vp, " is ", l.pp * l.vp);
         return str("pp-layers gives ",
                    count(int64_t(l.ppLayers.size()), "stage", "stages"),
                    ", pp is ", l.pp);
       }},
      {{"zero-needs-replicas", "zero 1 or 2 needs dp or cp of 2 or more",
        "ZeRO partitions the optimizer state over the ranks that hold the "
        "same parameters: dp x cp's"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.zero > 0 && zeroAxes(s.layout.dp, s.layout.cp).empty())
           return str("zero ", s.layout.zero,
                      " partitions the optimizer state over the ranks that "
                      "hold the same parameters and needs dp or cp of 2 or "
                      "more");
         return std::nullopt;
       }},
      {{"zero2-needs-whole-backward",
        "zero 2 runs a schedule whose backward pass completes each "
        "micro-batch's gradients (1f1b or gpipe)",
        "missing feature: ZeRO-2 reduce-scatters each micro-batch's "
        "gradients where its backward pass ends, which zb-h1 splits in two "
        "and the interleaved schedule spreads over chunks"},
       [](const Subject &s) -> std::optional<std::string> {
         const ScheduleTraits &traits = traitsOf(s.layout.scheduleKind());
         if (s.layout.zero == 2 && !traits.gradientsCompleteAtBackward)
           return str("zero 2 with schedule ", traits.name,
                      ": ZeRO-2 reduce-scatters each micro-batch's "
                      "gradients where its backward pass ends, which ",
                      traits.splitsWeightGradients
                          ? "this schedule splits in two"
                          : "this schedule spreads over a stage's chunks",
                      "; use zero 1, or schedule 1f1b");
         return std::nullopt;
       }},
      {{"grad-reduce-dtype-needs-zero2-bf16",
        "grad-reduce-dtype bf16 needs zero 2 and dtype bf16",
        "it reduce-scatters each micro-batch's bf16 weight gradients"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (l.gradReduceDtype == Precision::BF16 &&
             (l.zero != 2 || l.dtype != Precision::BF16))
           return std::string("grad-reduce-dtype bf16 reduce-scatters each "
                              "micro-batch's bf16 gradients and needs zero 2 "
                              "and dtype bf16");
         return std::nullopt;
       }},
      {{"fp8-needs-bf16", "fp8 needs dtype bf16",
        "FP8 products take bf16 activations"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.fp8 && s.layout.dtype != Precision::BF16)
           return str("fp8 needs dtype bf16 (FP8 products on bf16 "
                      "activations), got dtype ",
                      precisionName(s.layout.dtype));
         return std::nullopt;
       }},
      {{"fp8-recipe-needs-fp8", "the fp8-... options are given only with fp8",
        "they set how fp8 makes products FP8"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.fp8 || s.layout.fp8Recipe == Fp8Recipe())
           return std::nullopt;
         for (const LayoutOption &option : layoutOptions())
           if (std::string(option.name).rfind("fp8-", 0) == 0 &&
               !option.isDefault(s.layout))
             return str(option.name,
                        " sets how fp8 makes products FP8; it needs fp8");
         return std::nullopt;
       }},
      //===--- The step --------------------------------------------------===//
      {{"microbatches-divide-batch", "the micro-batches divide the batch",
        "every micro-batch has the same sequences"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.hasBatch() && s.step.batch % s.layout.microbatches != 0)
           return str("the batch of ", s.step.batch,
                      " sequences is not divisible by microbatches ",
                      s.layout.microbatches);
         return std::nullopt;
       }},
      {{"dp-divides-microbatch", "dp divides each micro-batch's sequences",
        "each data-parallel rank takes an equal share of every micro-batch"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (!s.hasBatch() || s.step.batch % l.microbatches != 0)
           return std::nullopt;
         const int64_t microBatch = s.step.batch / l.microbatches;
         if (microBatch % l.dp == 0)
           return std::nullopt;
         return str("the micro-batch of ", microBatch, " sequences (batch ",
                    s.step.batch, " / microbatches ", l.microbatches,
                    ") is not divisible by dp ", l.dp);
       }},
      {{"seq-len-within-positions",
        "the sequence length is at most the model's "
        "max_position_embeddings",
        "the rotary positions are the model's"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.hasModel() && s.hasSeqLen() && s.model.maxPositions > 0 &&
             s.step.seqLen > s.model.maxPositions)
           return str("seq-len ", s.step.seqLen,
                      " exceeds the model's max_position_embeddings ",
                      s.model.maxPositions);
         return std::nullopt;
       }},
      {{"tp-divides-sequence",
        "with sequence parallelism, tp (times cp) divides the sequence "
        "length",
        "each tensor-parallel rank holds an equal part of the sequence (under "
        "cp, of its cp block)"},
       [](const Subject &s) -> std::optional<std::string> {
         if (!s.layout.sequenceParallel || !s.hasSeqLen() || s.layout.tp < 2)
           return std::nullopt;
         if (s.layout.cp > 1 &&
             s.step.seqLen % (s.layout.cp * s.layout.tp) != 0)
           return str("sequence-parallel splits each cp block of the "
                      "sequence over tp ", s.layout.tp, ": cp ", s.layout.cp,
                      " x tp ", s.layout.tp, " does not divide seq-len ",
                      s.step.seqLen);
         if (s.step.seqLen % s.layout.tp != 0)
           return str("sequence-parallel splits the sequence over tp ",
                      s.layout.tp, ", which does not divide seq-len ",
                      s.step.seqLen);
         return std::nullopt;
       }},
      {{"cp-divides-sequence",
        "with context parallelism, 2 x cp divides the sequence length",
        "each sequence is cut into 2 x cp equal chunks, rank i holding "
        "chunks i and 2 x cp - 1 - i so that causal attention costs every "
        "rank the same"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.layout.cp > 1 && s.hasSeqLen() &&
             s.step.seqLen % (2 * s.layout.cp) != 0)
           return str("cp ", s.layout.cp, " cuts each sequence into ",
                      2 * s.layout.cp, " equal chunks, which do not divide "
                      "seq-len ", s.step.seqLen);
         return std::nullopt;
       }},
      //===--- The model -------------------------------------------------===//
      {{"a2a-divides-heads",
        "with cp-comm a2a, tp x cp divides the attention heads and the "
        "key/value heads",
        "the all-to-all exchange gives each of the tp x cp ranks its heads "
        "of the whole sequence"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (l.cpComm != ContextExchange::AllToAll || l.cp < 2 ||
             !s.hasModel())
           return std::nullopt;
         const int64_t ranks = l.tp * l.cp;
         for (auto [heads, what] :
              {std::pair(s.model.heads, "attention heads"),
               std::pair(s.model.kvHeads, "key/value heads")})
           if (heads % ranks != 0)
             return str("cp-comm a2a splits the heads over tp x cp = ",
                        ranks, ", which does not divide the model's ", heads,
                        " ", what, "; use cp-comm allgather or ring");
         return std::nullopt;
       }},
      {{"tp-divides-heads", "tp divides the attention heads",
        "each tensor-parallel rank computes heads / tp heads"},
       [](const Subject &s) {
         return tpDivides(s, s.model.heads, "attention heads");
       }},
      {{"tp-divides-kv-heads", "tp divides the key/value heads",
        "missing feature: Megatron replicates key/value heads over the "
        "ranks when tp exceeds them; mlt splits them, so tp must divide "
        "them"},
       [](const Subject &s) {
         return tpDivides(s, s.model.kvHeads, "key/value heads");
       }},
      {{"tp-divides-intermediate", "tp divides the MLP's intermediate size",
        "each tensor-parallel rank computes intermediate / tp features"},
       [](const Subject &s) {
         return tpDivides(s, s.model.intermediate,
                          "MLP features (intermediate_size)");
       }},
      {{"tp-divides-vocab", "tp divides the vocabulary",
        "missing feature: Megatron pads the vocabulary to a multiple of tp; "
        "mlt splits the embedding, LM head and loss over tp as they are"},
       [](const Subject &s) {
         return tpDivides(s, s.model.vocab, "vocabulary entries (vocab_size)");
       }},
      {{"stages-have-layers",
        "every (virtual) stage holds a decoder layer: the layers are at "
        "least pp x vp",
        "a stage is a run of consecutive layers"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (!s.hasModel() || l.pp * l.vp <= 1 || !l.ppLayers.empty() ||
             s.model.layers >= l.pp * l.vp)
           return std::nullopt;
         return str("the model's ", count(s.model.layers, "layer", "layers"),
                    " cannot fill pp ", l.pp,
                    l.vp > 1 ? str(" x vp ", l.vp, " virtual stages")
                             : std::string(" stages"));
       }},
      {{"pp-layers-sum", "pp-layers sums to the model's layers",
        "every layer is on exactly one stage"},
       [](const Subject &s) -> std::optional<std::string> {
         const Layout &l = s.layout;
         if (!s.hasModel() || l.ppLayers.empty())
           return std::nullopt;
         const int64_t sum =
             std::accumulate(l.ppLayers.begin(), l.ppLayers.end(), int64_t(0));
         if (sum == s.model.layers)
           return std::nullopt;
         return str("pp-layers sums to ", sum, " layers, the model has ",
                    s.model.layers);
       }},
      {{"tied-embeddings-pp-zero",
        "tied embeddings across pipeline stages do not take zero 1 or 2",
        "missing feature: the tied embedding's gradient is summed over the "
        "first and last stages in the optimizer step, which ZeRO's "
        "partitioned step does not do yet"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.hasModel() && s.model.tiedEmbeddings && s.layout.pp > 1 &&
             s.layout.zero > 0)
           return str("tied embeddings (tie_word_embeddings) across "
                      "pipeline stages do not compose with zero ",
                      s.layout.zero, " yet; use zero 0 or pp 1");
         return std::nullopt;
       }},
      {{"recompute-known-ops",
        "recompute names forward ops of the model that have a gradient rule",
        "only an activation the backward pass reads can be recomputed"},
       [](const Subject &s) -> std::optional<std::string> {
         if (s.model.recomputable.empty())
           return std::nullopt;
         for (const std::string &kind : s.layout.recompute)
           if (std::find(s.model.recomputable.begin(),
                         s.model.recomputable.end(),
                         kind) == s.model.recomputable.end())
             return str("recompute ", kind,
                        ": not a forward op with a gradient rule (such as "
                        "mlt.swiglu), so the backward pass reads none of its "
                        "results");
         return std::nullopt;
       }},
  };
  return table;
}

} // namespace

const std::vector<LayoutRule> &mlt::layoutRules() {
  static const std::vector<LayoutRule> rules = [] {
    std::vector<LayoutRule> out;
    for (const RuleRow &row : rows())
      out.push_back(row.rule);
    return out;
  }();
  return rules;
}

std::string Violation::text() const { return message + " (rule " + rule + ")"; }

std::vector<Violation> mlt::verify(const Layout &layout,
                                   const ModelShape &model,
                                   const StepShape &step) {
  const Subject subject{layout, model, step};
  std::vector<Violation> violations;
  for (const RuleRow &row : rows())
    if (std::optional<std::string> message = row.check(subject))
      violations.push_back({row.rule.name, std::move(*message)});
  return violations;
}

std::string mlt::formatLayoutRules() {
  std::string text =
      "The layout rule book: a layout that breaks one of these rules is "
      "refused before anything is compiled, in the same words by mlt-run, "
      "mlt-opt's mlt-train-pipeline and the planner.\n";
  for (const LayoutRule &rule : layoutRules())
    text += std::string("\n  ") + rule.name + "\n    " + rule.statement +
            ".\n    (" + rule.reason + ")\n";
  return text;
}
