//===- LayoutOptions.cpp - the layout's options, one table ----------------===//
//
// Part of mlt. See LayoutOptions.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Layout/LayoutOptions.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

using namespace mlt;

namespace {

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

/// The comma-separated items of `text` ("a,b,c"); an empty item stays one.
std::vector<std::string> splitList(std::string_view text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    items.emplace_back(text.substr(begin, end == std::string_view::npos
                                              ? std::string_view::npos
                                              : end - begin));
    if (end == std::string_view::npos)
      return items;
    begin = end + 1;
  }
}

std::string joinList(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ",") + item;
  return text;
}

Status expected(const char *what, std::string_view text) {
  return errorf("expected ", what, ", got '", text, "'");
}

/// A decimal integer of at least `min`, all of `text`.
StatusOr<int64_t> parseInteger(std::string_view text, int64_t min,
                               int64_t max = INT64_MAX) {
  const std::string copy(text);
  errno = 0;
  char *end = nullptr;
  const long long value = std::strtoll(copy.c_str(), &end, 10);
  if (copy.empty() || *end != '\0' || errno == ERANGE || value < min ||
      value > max) {
    if (max != INT64_MAX)
      return expected(("an integer from " + std::to_string(min) + " to " +
                       std::to_string(max))
                          .c_str(),
                      text);
    return expected(("an integer of at least " + std::to_string(min)).c_str(),
                    text);
  }
  return int64_t(value);
}

/// on|off (and true|false, 1|0); a switch given alone is on.
StatusOr<bool> parseOnOff(std::string_view text, bool alone) {
  if ((alone && text.empty()) || text == "on" || text == "true" || text == "1")
    return true;
  if (text == "off" || text == "false" || text == "0")
    return false;
  return expected("on or off", text);
}

StatusOr<Precision> parsePrecision(std::string_view text) {
  if (text == "fp32" || text == "f32")
    return Precision::F32;
  if (text == "bf16")
    return Precision::BF16;
  return expected("fp32 or bf16", text);
}

std::string onOff(bool value) { return value ? "on" : "off"; }

//===----------------------------------------------------------------------===//
// Parsers and printers, by kind of field
//===----------------------------------------------------------------------===//

/// An integer field of at least `Min`.
template <int64_t Layout::*Field, int64_t Min> struct Count {
  static Status parse(std::string_view text, Layout &layout) {
    StatusOr<int64_t> value = parseInteger(text, Min);
    if (!value)
      return value.takeStatus();
    layout.*Field = *value;
    return Status::ok();
  }
  static std::string print(const Layout &layout) {
    return std::to_string(layout.*Field);
  }
};

/// A bool field given as a switch (alone) or on|off.
template <bool Layout::*Field, bool Alone> struct Switch {
  static Status parse(std::string_view text, Layout &layout) {
    StatusOr<bool> value = parseOnOff(text, Alone);
    if (!value)
      return value.takeStatus();
    layout.*Field = *value;
    return Status::ok();
  }
  static std::string print(const Layout &layout) {
    return onOff(layout.*Field);
  }
};

template <Precision Layout::*Field> struct PrecisionField {
  static Status parse(std::string_view text, Layout &layout) {
    StatusOr<Precision> value = parsePrecision(text);
    if (!value)
      return value.takeStatus();
    layout.*Field = *value;
    return Status::ok();
  }
  static std::string print(const Layout &layout) {
    return precisionName(layout.*Field);
  }
};

Status parseZero(std::string_view text, Layout &layout) {
  if (text != "0" && text != "1" && text != "2")
    return expected("0, 1 or 2", text);
  layout.zero = text[0] - '0';
  return Status::ok();
}

Status parseCpComm(std::string_view text, Layout &layout) {
  if (text == "allgather")
    layout.cpComm = ContextExchange::AllGather;
  else if (text == "a2a")
    layout.cpComm = ContextExchange::AllToAll;
  else if (text == "ring")
    layout.cpComm = ContextExchange::Ring;
  else
    return expected("allgather, a2a or ring", text);
  return Status::ok();
}
std::string printCpComm(const Layout &layout) {
  return contextExchangeName(layout.cpComm);
}

Status parseSchedule(std::string_view text, Layout &layout) {
  std::optional<ScheduleKind> kind = parseScheduleKind(text);
  if (!kind)
    return expected(scheduleNames(), text);
  layout.schedule = *kind;
  return Status::ok();
}
std::string printSchedule(const Layout &layout) {
  return layout.schedule ? scheduleKindName(*layout.schedule) : "";
}

Status parsePpLayers(std::string_view text, Layout &layout) {
  std::vector<int64_t> counts;
  for (const std::string &item : splitList(text)) {
    StatusOr<int64_t> count = parseInteger(item, 1);
    if (!count)
      return expected("comma-separated layer counts of at least 1 (such as "
                      "5,6,6,5)",
                      text);
    counts.push_back(*count);
  }
  layout.ppLayers = std::move(counts);
  return Status::ok();
}
std::string printPpLayers(const Layout &layout) {
  std::string text;
  for (int64_t count : layout.ppLayers)
    text += (text.empty() ? "" : ",") + std::to_string(count);
  return text;
}

/// none, or op kinds with or without their dialect ("swiglu",
/// "mlt.swiglu"); kept by full name.
Status parseRecompute(std::string_view text, Layout &layout) {
  std::vector<std::string> kinds;
  if (text != "none")
    for (const std::string &kind : splitList(text)) {
      if (kind.empty() || kind == "none")
        return expected("none or comma-separated op kinds (such as swiglu)",
                        text);
      kinds.push_back(kind.find('.') == std::string::npos ? "mlt." + kind
                                                          : kind);
    }
  layout.recompute = std::move(kinds);
  return Status::ok();
}
/// The kinds of the mlt dialect by their short names.
std::string printRecompute(const Layout &layout) {
  std::vector<std::string> kinds;
  for (const std::string &kind : layout.recompute)
    kinds.push_back(kind.rfind("mlt.", 0) == 0 ? kind.substr(4) : kind);
  return kinds.empty() ? "none" : joinList(kinds);
}

/// none, all, or every:K (K at least 1).
Status parseRecomputeLayers(std::string_view text, Layout &layout) {
  if (text == "none" || text == "all") {
    layout.recomputeLayers = text == "all" ? 1 : 0;
    return Status::ok();
  }
  constexpr std::string_view prefix = "every:";
  const char *syntax = "none, all or every:K with K at least 1";
  if (text.substr(0, prefix.size()) != prefix)
    return expected(syntax, text);
  StatusOr<int64_t> every = parseInteger(text.substr(prefix.size()), 1);
  if (!every)
    return expected(syntax, text);
  layout.recomputeLayers = *every;
  return Status::ok();
}
std::string printRecomputeLayers(const Layout &layout) {
  switch (layout.recomputeLayers) {
  case 0:
    return "none";
  case 1:
    return "all";
  default:
    return "every:" + std::to_string(layout.recomputeLayers);
  }
}

Status parseGradBucketMiB(std::string_view text, Layout &layout) {
  StatusOr<int64_t> mib = parseInteger(text, 0, int64_t(1) << 20);
  if (!mib)
    return mib.takeStatus();
  layout.gradBucketBytes = *mib << 20;
  return Status::ok();
}
std::string printGradBucketMiB(const Layout &layout) {
  // (bytes that are no whole MiB come only from a caller that set them)
  if (layout.gradBucketBytes % (int64_t(1) << 20) != 0)
    return std::to_string(double(layout.gradBucketBytes) / double(1 << 20));
  return std::to_string(layout.gradBucketBytes >> 20);
}

Status parseFp8Products(std::string_view text, Layout &layout) {
  std::vector<std::string> products;
  for (const std::string &product : splitList(text)) {
    if (product != "fprop" && product != "dgrad" && product != "wgrad")
      return expected("fprop, dgrad or wgrad, comma-separated", text);
    if (std::find(products.begin(), products.end(), product) != products.end())
      return errorf("'", product, "' is named twice");
    products.push_back(product);
  }
  layout.fp8Recipe.products = std::move(products);
  return Status::ok();
}
std::string printFp8Products(const Layout &layout) {
  return joinList(layout.fp8Recipe.products);
}

Status parseFp8Accumulation(std::string_view text, Layout &layout) {
  if (text != "fast" && text != "f32")
    return expected("fast or f32", text);
  layout.fp8Recipe.fpropAccumulation = std::string(text);
  return Status::ok();
}
std::string printFp8Accumulation(const Layout &layout) {
  return layout.fp8Recipe.fpropAccumulation;
}

Status parseFp8Format(std::string_view text, Layout &layout) {
  if (text != "hybrid" && text != "e4m3")
    return expected("hybrid or e4m3", text);
  layout.fp8Recipe.format = std::string(text);
  return Status::ok();
}
std::string printFp8Format(const Layout &layout) {
  return layout.fp8Recipe.format;
}

Status parseFp8WeightCache(std::string_view text, Layout &layout) {
  if (text != "transposed" && text != "both")
    return expected("transposed or both", text);
  layout.fp8Recipe.weightCache = std::string(text);
  return Status::ok();
}
std::string printFp8WeightCache(const Layout &layout) {
  return layout.fp8Recipe.weightCache;
}

Status parseFp8Parameters(std::string_view text, Layout &layout) {
  std::vector<std::string> names = splitList(text);
  for (const std::string &name : names)
    if (name.empty())
      return expected("parameter names (or parts of them), comma-separated",
                      text);
  layout.fp8Recipe.bf16Parameters = std::move(names);
  return Status::ok();
}
std::string printFp8Parameters(const Layout &layout) {
  return joinList(layout.fp8Recipe.bf16Parameters);
}

template <int64_t Fp8Recipe::*Field> struct Fp8Layers {
  static Status parse(std::string_view text, Layout &layout) {
    StatusOr<int64_t> value = parseInteger(text, 0);
    if (!value)
      return value.takeStatus();
    layout.fp8Recipe.*Field = *value;
    return Status::ok();
  }
  static std::string print(const Layout &layout) {
    return std::to_string(layout.fp8Recipe.*Field);
  }
};

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

using S = LayoutSection;
using P = PlanRecord;

const std::vector<LayoutOption> kOptions = {
    {"tp", "N",
     "tensor-parallel ranks (default 1): attention heads, MLP features and "
     "the vocabulary (embedding, LM head, loss) split over N ranks, "
     "Megatron-style",
     S::Mesh, P::Recorded, true, Count<&Layout::tp, 1>::parse,
     Count<&Layout::tp, 1>::print},
    {"sequence-parallel", "",
     "also split the residual stream (norms, residual adds) along the "
     "sequence over the tp ranks",
     S::Mesh, P::Fixed, true, Switch<&Layout::sequenceParallel, true>::parse,
     Switch<&Layout::sequenceParallel, true>::print},
    {"pp", "N",
     "pipeline stages (default 1): the decoder layers split into N stages, "
     "balanced by predicted time (the embedding on the first, the norm, LM "
     "head and loss on the last); the split is printed",
     S::Mesh, P::Recorded, true, Count<&Layout::pp, 1>::parse,
     Count<&Layout::pp, 1>::print},
    {"vp", "N",
     "model chunks per pipeline stage (default 1): the layers split into "
     "pp * vp virtual stages, chunk c of stage s holding virtual stage "
     "c * pp + s (Megatron's interleaving); runs the interleaved schedule",
     S::Pipeline, P::Fixed, true, Count<&Layout::vp, 1>::parse,
     Count<&Layout::vp, 1>::print},
    {"dp", "N",
     "data-parallel ranks (default 1): each micro-batch split over N ranks",
     S::Mesh, P::Recorded, true, Count<&Layout::dp, 1>::parse,
     Count<&Layout::dp, 1>::print},
    {"cp", "N",
     "context-parallel ranks (default 1): each sequence split over N ranks "
     "(cut into 2N chunks, rank i holding chunks i and 2N-1-i, so that "
     "causal attention costs every rank the same); attention takes the "
     "other ranks' blocks as cp-comm says, the gradients are summed over "
     "the ranks; --layout auto tries it where the chunks hold 1024 tokens "
     "or more",
     S::Mesh, P::Recorded, true, Count<&Layout::cp, 1>::parse,
     Count<&Layout::cp, 1>::print},
    {"cp-comm", "allgather|a2a|ring",
     "with cp: allgather (default) gathers the whole sequence's keys and "
     "values, each rank attending from its own queries; a2a (DeepSpeed's "
     "Ulysses) exchanges all-to-all, heads for sequence, before attention "
     "and back after it, each rank attending over the whole sequence with "
     "heads / (tp x cp) heads (tp x cp must divide the heads and the "
     "key/value heads); ring passes each rank's key/value block around the "
     "cp ranks, attending to the block in hand while the next one travels, "
     "the gradients of the keys and values passed on with them",
     S::Mesh, P::Fixed, true, parseCpComm, printCpComm},
    {"zero", "0|1|2",
     "the optimizer state per data-parallel rank: 0 (default) every rank "
     "keeps all of it; 1 (ZeRO-1, Megatron's distributed optimizer) each "
     "keeps the AdamW moments and f32 master weights of its 1/dp slice of "
     "flat buckets (grad-bucket-mb), gradients reduce-scattered and "
     "parameters all-gathered; 2 (ZeRO-2, as Megatron-LLaMA's overlapped "
     "distributed optimizer) the gradients too, each micro-batch's "
     "reduce-scattered into the rank's slice as its backward pass finishes "
     "them",
     S::Memory, P::Recorded, true, parseZero, Count<&Layout::zero, 0>::print},
    {"microbatches", "N",
     "micro-batches per step, their gradients accumulated (default 1); the "
     "batch must be divisible by it",
     S::Pipeline, P::Recorded, true, Count<&Layout::microbatches, 1>::parse,
     Count<&Layout::microbatches, 1>::print},
    {"recompute", "none|OPS",
     "forward ops whose results the backward pass computes again instead of "
     "keeping them, comma-separated (default none): swiglu keeps one "
     "MLP-wide activation less per layer for one elementwise kernel per "
     "layer in the backward; the same results, bit for bit",
     S::Memory, P::Fixed, true, parseRecompute, printRecompute},
    {"recompute-layers", "none|all|every:K",
     "decoder layers recomputed whole in the backward pass (default none): "
     "each keeps only its output, the next layer's input, and its forward "
     "runs again right before its backward; all, or every:K for layers 0, "
     "K, 2K, ...: a recomputed layer's activations live only during its own "
     "backward, for about one more forward pass of compute; the same "
     "results, bit for bit",
     S::Memory, P::Fixed, true, parseRecomputeLayers, printRecomputeLayers},
    {"pp-layers", "A,B,...",
     "the layers of each stage, by hand (one count per stage, or per "
     "virtual stage with vp, summing to the model's layers; default: "
     "balanced by predicted time)",
     S::Pipeline, P::Fixed, true, parsePpLayers, printPpLayers},
    {"pp-group-size", "N",
     "with the interleaved schedule: the micro-batches each chunk runs in a "
     "row (Megatron's microbatch_group_size_per_vp_stage; default pp, "
     "between pp and the micro-batches)",
     S::Pipeline, P::Fixed, false, Count<&Layout::ppGroupSize, 1>::parse,
     Count<&Layout::ppGroupSize, 0>::print},
    {"schedule", "NAME", scheduleHelp(),
     S::Pipeline, P::Fixed, true, parseSchedule, printSchedule},
    {"dtype", "fp32|bf16",
     "compute precision (default fp32): bf16 computes on bf16 weight copies "
     "and activations, with f32 master weights, gradients and AdamW moments",
     S::Precision, P::Recorded, false, PrecisionField<&Layout::dtype>::parse,
     PrecisionField<&Layout::dtype>::print},
    {"fp8", "",
     "with dtype bf16: the decoder layers' linear layers multiply on FP8 "
     "tensor cores (e4m3 activations and weights, e5m2 gradients, each "
     "tensor quantized with its own power-of-two scale, f32 accumulation; "
     "mlt-fp8-products)",
     S::Precision, P::Fixed, false, Switch<&Layout::fp8, true>::parse,
     Switch<&Layout::fp8, true>::print},
    {"fp8-products", "LIST",
     "with fp8: the products made FP8, of fprop (x W^T), dgrad (dy W) and "
     "wgrad (dy^T x), comma-separated (default fprop,dgrad,wgrad)",
     S::Precision, P::Fixed, false, parseFp8Products, printFp8Products},
    {"fp8-fprop-accumulation", "fast|f32",
     "with fp8: the forward products accumulate in the tensor cores' fast "
     "FP8 accumulator or in f32, as the gradients' do (default fast)",
     S::Precision, P::Fixed, false, parseFp8Accumulation, printFp8Accumulation},
    {"fp8-format", "hybrid|e4m3",
     "with fp8: hybrid (e4m3 activations and weights, e5m2 gradients; the "
     "default) or e4m3 (gradients too)",
     S::Precision, P::Fixed, false, parseFp8Format, printFp8Format},
    {"fp8-weight-cache", "transposed|both",
     "with fp8 and micro-batches: what of each weight's quantization the "
     "step's first micro-batch keeps for the later ones: transposed (the "
     "default: the copy the backward reads, which costs no memory at a "
     "body's peak; later micro-batches quantize the forward copy alone) or "
     "both (no weight quantized after the first micro-batch; the forward "
     "copies, a byte a weight, held through the step; --layout auto "
     "weighs both beside transposed)",
     S::Precision, P::Fixed, true, parseFp8WeightCache, printFp8WeightCache},
    {"fp8-bf16-parameters", "LIST",
     "with fp8: parameters whose products stay bf16, by a part of their "
     "names, comma-separated (such as down_proj)",
     S::Precision, P::Fixed, false, parseFp8Parameters, printFp8Parameters},
    {"fp8-bf16-first-layers", "N",
     "with fp8: the model's first N decoder layers keep bf16 products "
     "(default 0)",
     S::Precision, P::Fixed, false,
     Fp8Layers<&Fp8Recipe::bf16FirstLayers>::parse,
     Fp8Layers<&Fp8Recipe::bf16FirstLayers>::print},
    {"fp8-bf16-last-layers", "N",
     "with fp8: the model's last N decoder layers keep bf16 products "
     "(default 0)",
     S::Precision, P::Fixed, false,
     Fp8Layers<&Fp8Recipe::bf16LastLayers>::parse,
     Fp8Layers<&Fp8Recipe::bf16LastLayers>::print},
    {"grad-reduce-dtype", "fp32|bf16",
     "with zero 2 and dtype bf16: bf16 computes the matrix products' weight "
     "gradients in bf16 and reduce-scatters them in bf16 (half the bytes; "
     "FSDP2's reduce_dtype), adding them into the f32 gradient slices; fp32 "
     "(default) keeps every gradient f32",
     S::Precision, P::Fixed, false,
     PrecisionField<&Layout::gradReduceDtype>::parse,
     PrecisionField<&Layout::gradReduceDtype>::print},
    {"overlap-grad-reduce", "on|off",
     "on (default): the dp ranks reduce each bucket of gradients as soon as "
     "the last micro-batch's backward pass has finished it, on a stream of "
     "its own, under the rest of the backward; off: all after the backward, "
     "in the optimizer step",
     S::Overlap, P::Fixed, false,
     Switch<&Layout::overlapGradReduce, false>::parse,
     Switch<&Layout::overlapGradReduce, false>::print},
    {"grad-bucket-mb", "N",
     "gradients per reduction: a bucket closes at N MiB or more (default 32; "
     "0: one reduction per gradient); ZeRO's flat buckets too",
     S::Overlap, P::Fixed, false, parseGradBucketMiB, printGradBucketMiB},
    {"overlap-param-gather", "on|off",
     "with zero 1 or 2: on (default) each bucket of updated parameters is "
     "all-gathered under the next step's forward pass, each layer waiting "
     "only for its own; off: at the end of the optimizer step",
     S::Overlap, P::Fixed, false,
     Switch<&Layout::overlapParamGather, false>::parse,
     Switch<&Layout::overlapParamGather, false>::print},
    {"overlap-tp-comm", "on|off",
     "with tp: on (default) the backward pass's all-reduces of input "
     "gradients run on a stream of their own, under the weight-gradient "
     "products before them (Megatron's asynchronous tensor-parallel "
     "all-reduce); off: each on the compute stream where it is computed",
     S::Overlap, P::Fixed, false,
     Switch<&Layout::overlapTpComm, false>::parse,
     Switch<&Layout::overlapTpComm, false>::print},
};

/// `text` wrapped into lines of at most `width` columns, each but the first
/// indented by `indent` spaces.
std::string wrap(const std::string &text, size_t indent, size_t width) {
  std::string out, line;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(' ', begin);
    if (end == std::string::npos)
      end = text.size();
    const std::string word = text.substr(begin, end - begin);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    begin = end + 1;
  }
  return out + line;
}

} // namespace

bool LayoutOption::isDefault(const Layout &layout) const {
  return print(layout) == print(Layout());
}

const std::vector<LayoutOption> &mlt::layoutOptions() { return kOptions; }

const LayoutOption *mlt::findLayoutOption(std::string_view name) {
  for (const LayoutOption &option : kOptions)
    if (name == option.name)
      return &option;
  return nullptr;
}

Status mlt::setLayoutOption(Layout &layout, const LayoutOption &option,
                            std::string_view text, std::string_view spelling) {
  if (!option.isSwitch() && text.empty())
    return errorf(spelling, ": expected a value, got an empty one");
  return option.parse(text, layout).withContext(std::string(spelling));
}

std::string mlt::layoutFlags(const Layout &layout) {
  std::string text;
  for (const LayoutOption &option : kOptions) {
    if (option.isDefault(layout))
      continue;
    text += (text.empty() ? "--" : " --") + std::string(option.name);
    if (!option.isSwitch())
      text += " " + option.print(layout);
    else if (option.print(layout) != "on")
      text += "=" + option.print(layout);
  }
  return text.empty() ? "one GPU" : text;
}

std::string mlt::layoutOptionText(const Layout &layout) {
  std::string text;
  for (const LayoutOption &option : kOptions) {
    if (option.isDefault(layout))
      continue;
    text += (text.empty() ? "" : " ") + std::string(option.name);
    if (!option.isSwitch() || option.print(layout) != "on")
      text += "=" + option.print(layout);
  }
  return text;
}

StatusOr<Layout> mlt::parseLayoutOptionText(std::string_view text) {
  Layout layout;
  size_t begin = 0;
  while (begin < text.size()) {
    if (text[begin] == ' ') {
      ++begin;
      continue;
    }
    size_t end = text.find(' ', begin);
    if (end == std::string_view::npos)
      end = text.size();
    const std::string_view item = text.substr(begin, end - begin);
    const size_t eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    const LayoutOption *option = findLayoutOption(name);
    if (!option)
      return errorf("unknown layout option '", name, "'");
    MLT_RETURN_IF_ERROR(setLayoutOption(
        layout, *option,
        eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1),
        name));
    begin = end;
  }
  return layout;
}

std::string mlt::layoutUsage(LayoutSection section) {
  constexpr size_t kColumn = 29, kWidth = 80;
  std::string text;
  for (const LayoutOption &option : kOptions) {
    if (option.section != section)
      continue;
    std::string flag = "  --" + std::string(option.name);
    if (!option.isSwitch())
      flag += " " + std::string(option.value);
    text += flag;
    if (flag.size() + 1 > kColumn)
      text += "\n" + std::string(kColumn, ' ');
    else
      text += std::string(kColumn - flag.size(), ' ');
    text += wrap(option.help, kColumn, kWidth) + "\n";
  }
  return text;
}
