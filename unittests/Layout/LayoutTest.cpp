//===- LayoutTest.cpp - the layout value, its options and rule book -------===//
//
// Part of mlt. Unit tests of mlt/Layout: the options' text forms read back
// to the same layout, every parser refuses what it cannot read, each rule
// of the book fires on a layout made to break it (and only there), and the
// schedule rules agree exactly with the schedule builders they stand in
// front of (Analysis/PipelineSchedule.h, the reference: the rule book must
// accept what they build and refuse what they do not).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/PipelineSchedule.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Layout/LayoutRules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

using namespace mlt;

namespace {

/// A random layout: every field drawn, valid or not as a combination.
Layout randomLayout(std::mt19937 &rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto coin = [&] { return pick(0, 1) == 1; };
  Layout l;
  l.tp = pick(1, 8);
  l.dp = pick(1, 8);
  l.pp = pick(1, 8);
  l.sequenceParallel = coin();
  l.vp = pick(1, 4);
  for (int64_t i = pick(0, 3); i > 0; --i)
    l.ppLayers.push_back(pick(1, 9));
  l.ppGroupSize = pick(0, 1) ? pick(1, 6) : 0;
  if (coin())
    l.schedule = scheduleTable()[size_t(pick(0, 3))].kind;
  l.microbatches = pick(1, 16);
  l.zero = pick(0, 2);
  if (coin())
    l.recompute = {"mlt.swiglu"};
  if (coin())
    l.recompute.push_back("other.op");
  l.recomputeLayers = pick(0, 3);
  l.dtype = coin() ? Precision::BF16 : Precision::F32;
  l.fp8 = coin();
  if (coin())
    l.fp8Recipe.products = {"wgrad", "fprop"};
  if (coin())
    l.fp8Recipe.fpropAccumulation = "f32";
  if (coin())
    l.fp8Recipe.format = "e4m3";
  if (coin())
    l.fp8Recipe.bf16Parameters = {"down_proj", "q"};
  l.fp8Recipe.bf16FirstLayers = pick(0, 2);
  l.fp8Recipe.bf16LastLayers = pick(0, 2);
  if (coin())
    l.fp8Recipe.weightCache = "both";
  l.gradReduceDtype = coin() ? Precision::BF16 : Precision::F32;
  l.overlapGradReduce = coin();
  l.overlapParamGather = coin();
  l.gradBucketBytes = pick(0, 64) << 20;
  return l;
}

TEST(LayoutOptionsTest, TextFormsReadBackToTheSameLayout) {
  std::mt19937 rng(20261129);
  for (int i = 0; i < 2000; ++i) {
    const Layout layout = randomLayout(rng);
    const std::string text = layoutOptionText(layout);
    StatusOr<Layout> parsed = parseLayoutOptionText(text);
    ASSERT_TRUE(parsed) << text << ": " << parsed.status().message();
    EXPECT_TRUE(*parsed == layout) << text;
    // mlt-run's spelling: "--NAME VALUE" for "NAME=VALUE".
    std::string flags = layoutFlags(layout), rewritten;
    if (flags == "one GPU")
      flags.clear();
    for (size_t at = 0; at < flags.size();) {
      size_t next = flags.find(" --", at + 1);
      std::string item = flags.substr(at, next - at);
      if (item[0] == ' ')
        item.erase(0, 1);
      item.erase(0, 2);
      if (size_t space = item.find(' '); space != std::string::npos)
        item[space] = '=';
      rewritten += (rewritten.empty() ? "" : " ") + item;
      at = next == std::string::npos ? flags.size() : next;
    }
    EXPECT_EQ(rewritten, text);
  }
  EXPECT_EQ(layoutFlags(Layout()), "one GPU");
  EXPECT_EQ(layoutOptionText(Layout()), "");
}

TEST(LayoutOptionsTest, ParsersRefuseWhatTheyCannotRead) {
  const std::vector<std::pair<const char *, const char *>> bad = {
      {"tp", "0"},
      {"tp", "two"},
      {"dp", "-1"},
      {"pp", "1.5"},
      {"vp", ""},
      {"microbatches", "0"},
      {"zero", "3"},
      {"schedule", "1F1B"},
      {"dtype", "fp16"},
      {"recompute", ","},
      {"recompute", "none,swiglu"},
      {"recompute-layers", "every:0"},
      {"recompute-layers", "2"},
      {"recompute-layers", "every"},
      {"pp-layers", "3,,3"},
      {"pp-layers", "0"},
      {"pp-group-size", "0"},
      {"fp8-products", "fprop,fprop"},
      {"fp8-products", "bprop"},
      {"fp8-fprop-accumulation", "f16"},
      {"fp8-format", "e5m2"},
      {"fp8-bf16-parameters", "a,"},
      {"fp8-bf16-first-layers", "-1"},
      {"grad-reduce-dtype", "f16"},
      {"overlap-grad-reduce", "maybe"},
      {"grad-bucket-mb", "1048577"},
      {"sequence-parallel", "yes"},
      {"fp8", "2"},
  };
  for (const auto &[name, value] : bad) {
    const LayoutOption *option = findLayoutOption(name);
    ASSERT_NE(option, nullptr) << name;
    Layout layout;
    Status status =
        setLayoutOption(layout, *option, value, std::string("--") + name);
    ASSERT_FALSE(status) << name << " " << value;
    EXPECT_EQ(status.message().rfind(std::string("--") + name + ": ", 0), 0u)
        << status.message();
    EXPECT_EQ(status.message().find('\n'), std::string::npos);
  }
  EXPECT_FALSE(parseLayoutOptionText("tp=2 ep=2"));
}

TEST(LayoutOptionsTest, EveryFieldHasAnOption) {
  // Each option moves the default layout off its default; so a field
  // without an option would make two layouts that differ print alike
  // (TextFormsReadBackToTheSameLayout holds the converse).
  std::set<std::string> names;
  for (const LayoutOption &option : layoutOptions()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_TRUE(option.isDefault(Layout())) << option.name;
  }
  EXPECT_EQ(names.size(), 28u) << "a new Layout field: give it an option, a "
                                  "rule where it needs one, and update this";
}

TEST(LayoutTest, AxesAreInRankOrder) {
  std::vector<std::string> names;
  for (const ParallelAxisInfo &axis : parallelAxes())
    names.push_back(axis.name);
  EXPECT_EQ(names, (std::vector<std::string>{"pp", "dp", "cp", "tp"}));
  Layout layout;
  layout.tp = 2;
  layout.dp = 3;
  layout.pp = 5;
  layout.cp = 7;
  EXPECT_EQ(layout.ranks(), 210);
  for (const ParallelAxisInfo &axis : parallelAxes())
    EXPECT_EQ(axisName(axis.axis), std::string(axis.name));
}

TEST(LayoutTest, ZeroPartitionsOverTheReplicasMajorFirst) {
  using Axes = std::vector<ParallelAxis>;
  EXPECT_EQ(zeroAxes(1, 1), Axes{});
  EXPECT_EQ(zeroAxes(4, 1), Axes{ParallelAxis::Data});
  EXPECT_EQ(zeroAxes(1, 3), Axes{ParallelAxis::Context});
  // Both: dp then cp (a slice is the cp block of the rank's dp block), in
  // the axes' rank order.
  EXPECT_EQ(zeroAxes(2, 4), (Axes{ParallelAxis::Data, ParallelAxis::Context}));
  std::vector<ParallelAxis> order;
  for (const ParallelAxisInfo &axis : parallelAxes())
    order.push_back(axis.axis);
  EXPECT_LT(std::find(order.begin(), order.end(), ParallelAxis::Data),
            std::find(order.begin(), order.end(), ParallelAxis::Context));
}

TEST(LayoutTest, DefaultScheduleFollowsTheChunks) {
  EXPECT_EQ(defaultSchedule(1), ScheduleKind::OneFOneB);
  EXPECT_EQ(defaultSchedule(2), ScheduleKind::Interleaved);
  for (const ScheduleTraits &traits : scheduleTable()) {
    EXPECT_EQ(parseScheduleKind(traits.name), traits.kind);
    EXPECT_EQ(&traitsOf(traits.kind), &traits);
  }
  EXPECT_EQ(std::string(scheduleNames()), "1f1b, gpipe, zb-h1 or interleaved");
}

/// A model that breaks no rule of tp 2, pp 2 (the base of RulesFire).
ModelShape plainModel() {
  ModelShape model;
  model.vocab = 256;
  model.hidden = 64;
  model.intermediate = 128;
  model.heads = 4;
  model.kvHeads = 2;
  model.headDim = 16;
  model.layers = 4;
  model.maxPositions = 64;
  model.recomputable = {"mlt.swiglu", "mlt.rmsnorm"};
  return model;
}

std::set<std::string> rulesBroken(const Layout &layout, const ModelShape &model,
                                  const StepShape &step) {
  std::set<std::string> names;
  for (const Violation &violation : verify(layout, model, step)) {
    names.insert(violation.rule);
    EXPECT_EQ(violation.text().find('\n'), std::string::npos);
    EXPECT_NE(violation.text().find("(rule " + violation.rule + ")"),
              std::string::npos);
  }
  return names;
}

TEST(LayoutRulesTest, EachRuleFiresAlone) {
  const ModelShape base = plainModel();
  const StepShape step{8, 32};
  struct Breaker {
    const char *rule;
    std::function<void(Layout &, ModelShape &, StepShape &)> make;
  };
  const std::vector<Breaker> breakers = {
      {"sequence-parallel-needs-tp",
       [](Layout &l, ModelShape &, StepShape &) { l.sequenceParallel = true; }},
      {"vp-needs-pp",
       [](Layout &l, ModelShape &, StepShape &) {
         l.vp = 2;
         l.schedule = ScheduleKind::Interleaved;
       }},
      {"schedule-fits-chunks",
       [](Layout &l, ModelShape &, StepShape &) {
         l.pp = 2;
         l.schedule = ScheduleKind::Interleaved;
       }},
      {"group-size-needs-schedule",
       [](Layout &l, ModelShape &, StepShape &) {
         l.pp = 2;
         l.ppGroupSize = 2;
       }},
      {"interleaved-groups",
       [](Layout &l, ModelShape &, StepShape &) {
         l.pp = 2;
         l.vp = 2;
         l.microbatches = 1;
       }},
      {"pp-layers-per-stage",
       [](Layout &l, ModelShape &, StepShape &) {
         l.pp = 2;
         l.ppLayers = {4};
       }},
      {"zero-needs-replicas",
       [](Layout &l, ModelShape &, StepShape &) { l.zero = 1; }},
      {"zero2-needs-whole-backward",
       [](Layout &l, ModelShape &, StepShape &) {
         l.dp = 2;
         l.zero = 2;
         l.schedule = ScheduleKind::ZeroBubbleH1;
       }},
      {"grad-reduce-dtype-needs-zero2-bf16",
       [](Layout &l, ModelShape &, StepShape &) {
         l.gradReduceDtype = Precision::BF16;
       }},
      {"fp8-needs-bf16",
       [](Layout &l, ModelShape &, StepShape &) { l.fp8 = true; }},
      {"fp8-recipe-needs-fp8",
       [](Layout &l, ModelShape &, StepShape &) {
         l.fp8Recipe.format = "e4m3";
       }},
      {"microbatches-divide-batch",
       [](Layout &l, ModelShape &, StepShape &) { l.microbatches = 3; }},
      {"dp-divides-microbatch",
       [](Layout &l, ModelShape &, StepShape &) { l.dp = 3; }},
      {"seq-len-within-positions",
       [](Layout &, ModelShape &, StepShape &s) { s.seqLen = 65; }},
      {"tp-divides-sequence",
       [](Layout &l, ModelShape &, StepShape &s) {
         l.tp = 2;
         l.sequenceParallel = true;
         s.seqLen = 31;
       }},
      {"cp-divides-sequence",
       [](Layout &l, ModelShape &, StepShape &s) {
         l.cp = 2;
         s.seqLen = 30; // 4 chunks
       }},
      {"tp-divides-sequence",
       [](Layout &l, ModelShape &m, StepShape &s) {
         // 12 is 4 chunks of cp and 4 blocks of tp, not 8 of cp x tp.
         l.cp = 2;
         l.tp = 4;
         l.sequenceParallel = true;
         m.kvHeads = 4;
         s.seqLen = 12;
       }},
      {"cp-comm-needs-cp",
       [](Layout &l, ModelShape &, StepShape &) {
         l.cpComm = ContextExchange::AllToAll;
       }},
      {"a2a-divides-heads",
       [](Layout &l, ModelShape &m, StepShape &) {
         // 2 x 2 divides the 8 query heads but not the 2 key/value heads.
         l.cp = 2;
         l.tp = 2;
         l.cpComm = ContextExchange::AllToAll;
         m.heads = 8;
         m.kvHeads = 2;
       }},
      {"tp-divides-heads",
       [](Layout &l, ModelShape &m, StepShape &) {
         // (not a model HF builds, whose key/value heads divide its heads:
         // there tp-divides-kv-heads fires too)
         l.tp = 2;
         m.heads = 3;
       }},
      {"tp-divides-kv-heads",
       [](Layout &l, ModelShape &m, StepShape &) {
         l.tp = 2;
         m.kvHeads = 1;
       }},
      {"tp-divides-intermediate",
       [](Layout &l, ModelShape &m, StepShape &) {
         l.tp = 2;
         m.intermediate = 129;
       }},
      {"tp-divides-vocab",
       [](Layout &l, ModelShape &m, StepShape &) {
         l.tp = 2;
         m.vocab = 257;
       }},
      {"stages-have-layers",
       [](Layout &l, ModelShape &m, StepShape &) {
         l.pp = 2;
         m.layers = 1;
       }},
      {"pp-layers-sum",
       [](Layout &l, ModelShape &, StepShape &) {
         l.pp = 2;
         l.ppLayers = {2, 3};
       }},
      {"tied-embeddings-pp-zero",
       [](Layout &l, ModelShape &m, StepShape &) {
         l.pp = 2;
         l.dp = 2;
         l.zero = 1;
         m.tiedEmbeddings = true;
       }},
      {"recompute-known-ops",
       [](Layout &l, ModelShape &, StepShape &) {
         l.recompute = {"mlt.matmul"};
       }},
  };
  std::set<std::string> covered;
  for (const Breaker &breaker : breakers) {
    Layout layout;
    ModelShape model = base;
    StepShape shape = step;
    breaker.make(layout, model, shape);
    EXPECT_EQ(rulesBroken(layout, model, shape),
              std::set<std::string>{breaker.rule});
    covered.insert(breaker.rule);
  }
  // Every rule of the book has its breaker here.
  for (const LayoutRule &rule : layoutRules())
    EXPECT_TRUE(covered.count(rule.name)) << rule.name;
  EXPECT_TRUE(verify(Layout(), base, step).empty());
}

TEST(LayoutRulesTest, UnknownModelAndStepAreNotChecked) {
  Layout layout;
  layout.tp = 3;
  layout.microbatches = 3;
  EXPECT_TRUE(verify(layout, ModelShape(), StepShape()).empty());
}

// The schedule rules are exact: over every small pipeline, the rule book
// accepts a layout's schedule exactly when buildStageSchedule builds it.
TEST(LayoutRulesTest, ScheduleRulesAgreeWithTheBuilders) {
  const std::set<std::string> scheduleRules = {
      "vp-needs-pp", "schedule-fits-chunks", "group-size-needs-schedule",
      "interleaved-groups"};
  int checked = 0;
  for (int64_t pp = 2; pp <= 4; ++pp)
    for (int64_t vp = 1; vp <= 3; ++vp)
      for (int64_t m = 1; m <= 10; ++m)
        for (int64_t group = 0; group <= m + 1; ++group)
          for (const ScheduleTraits &traits : scheduleTable()) {
            Layout layout;
            layout.pp = pp;
            layout.vp = vp;
            layout.microbatches = m;
            layout.ppGroupSize = group;
            layout.schedule = traits.kind;
            bool accepted = true;
            for (const Violation &v : verify(layout, ModelShape(), StepShape()))
              accepted &= !scheduleRules.count(v.rule);
            std::string why;
            const bool built =
                buildStageSchedule(traits.kind, pp, vp, m, group, &why)
                    .has_value();
            EXPECT_EQ(accepted, built)
                << traits.name << " pp " << pp << " vp " << vp << " m " << m
                << " group " << group << ": " << why;
            ++checked;
          }
  EXPECT_GT(checked, 1000);
}

} // namespace
