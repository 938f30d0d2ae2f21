//===- Planner.cpp - the layout planner (mlt-run --layout auto) -----------===//
//
// Part of mlt. See Planner.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Planner/Planner.h"

#include "mlt/Analysis/StepLowerBound.h"
#include "mlt/Analysis/StepReport.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Plan/MemoryReport.h"
#include "mlt/Support/FormatBytes.h"
#include "mlt/Support/Threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <optional>
#include <thread>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// The fewest layers of a virtual stage at which screening compiles shallow
/// (its compiles hold 2 and 3 layers a virtual stage; below 5, the model's
/// own depth costs no more than they do).
constexpr int64_t kShallowFrom = 5;
/// Confirmation goes on while a layout's estimated step is within this
/// share of the fifth fastest confirmed one.
constexpr double kStepMargin = 0.03;
/// An estimated arena this share over the limit may still fit: it is kept
/// for confirmation.
constexpr double kMemoryMargin = 0.02;
/// The layouts printed.
constexpr size_t kShown = 5;
/// A deep pipeline is bounded from its schedule's fewest micro-batches from
/// 3 on where it runs at least this many times them.
constexpr int64_t kBoundedFrom = 4;
/// The layouts weighed at their depth between two prunings by the fifth
/// fastest: a fixed number, so that what is pruned does not depend on the
/// machine's cores.
constexpr size_t kWave = 8;

/// Appends printf's formatting of `format` and the arguments to `text`.
__attribute__((format(printf, 2, 3))) void appendf(std::string &text,
                                                   const char *format, ...) {
  va_list arguments, again;
  va_start(arguments, format);
  va_copy(again, arguments);
  const int length = std::vsnprintf(nullptr, 0, format, arguments);
  va_end(arguments);
  if (length > 0) {
    const size_t at = text.size();
    text.resize(at + size_t(length) + 1);
    std::vsnprintf(&text[at], size_t(length) + 1, format, again);
    text.resize(at + size_t(length));
  }
  va_end(again);
}

/// A layout weighed.
struct Candidate {
  Layout layout;
  /// Of the layout at the model's depth: exact (compiled at its depth) or
  /// extrapolated from two shallow compiles.
  cost::LayoutFigures figures;
  bool exact = false;
  cost::StepBound bound;
  /// The memory-saving variants not tried yet (while this one may not fit).
  std::deque<Layout> fallbacks;
};

/// A layout compiled and predicted, or the compiler's refusal.
struct Weighed {
  bool ok = false;
  std::string why;
  cost::LayoutFigures figures;
  cost::StepBound bound;
};

/// A layout weighed at its depth (`exact`) or at a shallow one.
struct WeighedLayout : Weighed {
  bool exact = false;
  /// Shallow: the model's layers, their split into virtual stages, and
  /// the layers each virtual stage holds fewer than in the split.
  int64_t numLayers = 0;
  std::vector<int64_t> split;
  int64_t fewer = 0;
  /// Left at its shallowest depth, slower there than the fifth fastest.
  bool slower = false;
  /// A deep pipeline's bound alone (boundStep): `figures.step` bounds its
  /// step from below, its arenas are those of fewer micro-batches (no
  /// larger than its own), its persistent state its own.
  bool bounded = false;
};

class Planner {
public:
  Planner(const PlannerRequest &request, const cost::Calibration &calibration,
          const PlannerCompiler &compiler, const PlannerObserver &observer)
      : request_(request), calibration_(calibration), compiler_(compiler),
        observer_(observer), start_(std::chrono::steady_clock::now()) {}

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start_)
        .count();
  }

  /// Screening (Planner.h): each layout's shallowest compile first; then,
  /// fastest first, the layouts weighed at their depth (their variants as
  /// needed) into the candidates, but for those already slower at the
  /// shallower depth than the fifth fastest estimate. Both on every core.
  Status screen(const std::vector<Layout> &layouts) {
    std::vector<StatusOr<WeighedLayout>> first(layouts.size(), WeighedLayout{});
    inParallel(layouts.size(), [&](size_t i) {
      first[i] = weighShallowest(layouts[i], /*boundDeep=*/true);
    });
    std::vector<size_t> order;
    for (size_t i = 0; i < layouts.size(); ++i) {
      if (!first[i])
        return first[i].takeStatus();
      order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return first[a]->figures.step < first[b]->figures.step;
    });
    // In waves of kWave layouts (on every core), each wave's outcomes
    // merged before the next is pruned by the fifth fastest.
    for (size_t begin = 0; begin < order.size(); begin += kWave) {
      progress("weighing", begin, order.size());
      const size_t end = std::min(order.size(), begin + kWave);
      // (the wave's bound, whatever order its layouts end in)
      const std::optional<double> fifth = fifthFastest(candidates_);
      std::vector<size_t> weighed;
      for (size_t o = begin; o < end; ++o) {
        const size_t i = order[o];
        const WeighedLayout &shallowest = *first[i];
        if (!shallowest.ok) {
          ++refused_;
          noteRefusal(layouts[i], shallowest.why);
        } else if (!fits(shallowest.figures.mostPersistent(),
                         /*exact=*/true)) {
          // (no variant changes it; a deeper model only adds to it)
          ++tooLarge_;
          noteTooLarge(layouts[i], shallowest.figures.arena());
        } else if (slowerThan(shallowest.figures.step, fifth)) {
          ++slower_;
        } else {
          weighed.push_back(i);
        }
      }
      std::vector<StatusOr<Outcome>> outcomes(weighed.size(), Outcome{});
      inParallel(weighed.size(), [&](size_t k) {
        outcomes[k] =
            placeFamily(layouts[weighed[k]], std::move(*first[weighed[k]]),
                        fifth);
      });
      for (StatusOr<Outcome> &outcome : outcomes) {
        if (!outcome)
          return outcome.takeStatus();
        merge(std::move(*outcome));
      }
    }
    return Status::ok();
  }

  /// Confirmation (Planner.h); the confirmed layouts that fit, fastest
  /// first.
  StatusOr<std::vector<Candidate>> confirm() {
    std::vector<Candidate> confirmed;
    size_t done = 0;
    while (!candidates_.empty()) {
      auto next = std::min_element(candidates_.begin(), candidates_.end(),
                                   [](const Candidate &a, const Candidate &b) {
                                     return a.figures.step < b.figures.step;
                                   });
      if (const std::optional<double> fifth = fifthFastest(confirmed);
          fifth && next->figures.step > *fifth * (1.0 + kStepMargin))
        break;
      Candidate candidate = std::move(*next);
      candidates_.erase(next);
      progress("confirming", done, done + candidates_.size());
      ++done;
      if (!candidate.exact) {
        StatusOr<WeighedLayout> weighed =
            weigh(candidate.layout, /*exact=*/true);
        if (!weighed)
          return weighed.takeStatus();
        if (!weighed->ok) {
          // (refused at the model's depth, which its shallow compiles were
          // not: counted as refused)
          --fitting_;
          ++refused_;
          noteRefusal(candidate.layout, weighed->why);
          continue;
        }
        candidate.figures = weighed->figures;
        candidate.bound = weighed->bound;
        candidate.exact = true;
      }
      if (!fits(candidate.figures.arena(), /*exact=*/true)) {
        --fitting_;
        noteTooLarge(candidate.layout, candidate.figures.arena());
        Known known;
        known.note(candidate.layout, candidate.figures.step);
        StatusOr<Outcome> outcome =
            placeVariants(std::move(candidate.fallbacks),
                          fifthFastest(confirmed), known, Outcome{});
        if (!outcome)
          return outcome.takeStatus();
        merge(std::move(*outcome));
        continue;
      }
      confirmed.push_back(std::move(candidate));
    }
    std::stable_sort(confirmed.begin(), confirmed.end(),
                     [](const Candidate &a, const Candidate &b) {
                       return a.figures.step < b.figures.step;
                     });
    return confirmed;
  }

  /// The layouts that were not confirmed (estimates), slowest last.
  std::vector<Candidate> unconfirmed() const {
    std::vector<Candidate> rest = candidates_;
    std::stable_sort(rest.begin(), rest.end(),
                     [](const Candidate &a, const Candidate &b) {
                       return a.figures.step < b.figures.step;
                     });
    return rest;
  }

  std::atomic<size_t> compiled{0}, shallow{0}, fewerMicrobatches{0},
      bounded{0};
  size_t fitting() const { return fitting_; }
  size_t slower() const { return slower_; }
  size_t tooLarge() const { return tooLarge_; }
  size_t refused() const { return refused_; }
  const std::string &firstRefusal() const { return firstRefusal_; }
  const std::optional<std::pair<uint64_t, Layout>> &closest() const {
    return closest_;
  }

private:
  void progress(const char *what, size_t i, size_t n) {
    if (elapsed() - lastProgress_ < 5.0)
      return;
    lastProgress_ = elapsed();
    if (!observer_.progress)
      return;
    std::string line;
    appendf(line, "planning: %s, %zu of %zu layouts, %.0f s", what, i, n,
            lastProgress_);
    observer_.progress(line);
  }

  bool fits(uint64_t arena, bool exact) const {
    if (!request_.arenaLimit)
      return true;
    const double limit =
        double(request_.arenaLimit) * (exact ? 1.0 : 1.0 + kMemoryMargin);
    return double(arena) <= limit;
  }

  void noteRefusal(const Layout &layout, const std::string &why) {
    if (firstRefusal_.empty())
      firstRefusal_ = layoutFlags(layout) + ": " + why;
  }
  void noteTooLarge(const Layout &layout, uint64_t arena) {
    if (!closest_ || arena < closest_->first)
      closest_ = {arena, layout};
  }

  /// What weighing a layout and its variants came to: the candidate that
  /// fits (or may), or the compiler's refusal, or neither (none fits); and
  /// the arenas that did not fit.
  struct Outcome {
    std::optional<Candidate> candidate;
    std::optional<std::pair<Layout, std::string>> refusal;
    std::vector<std::pair<uint64_t, Layout>> tooLarge;
    /// Variants were left out as slower than the fifth fastest (without a
    /// candidate: the layout is counted so).
    bool slower = false;
  };

  /// Whether `step` is slower than the fifth fastest by more than the
  /// margin.
  static bool slowerThan(double step, const std::optional<double> &fifth) {
    return fifth && step > *fifth * (1.0 + kStepMargin);
  }

  static bool recomputes(const Layout &layout) {
    return !layout.recompute.empty() || layout.recomputeLayers;
  }

  /// The least step known of a family's layouts that recompute nothing,
  /// with and without sequence parallelism (at their depth or a shallower
  /// one): a variant that recomputes runs more of the forward pass than its
  /// counterpart that does not, and is no faster.
  struct Known {
    std::optional<double> step[2];
    void note(const Layout &layout, double seconds) {
      if (recomputes(layout))
        return;
      std::optional<double> &known = step[layout.sequenceParallel];
      known = known ? std::min(*known, seconds) : seconds;
    }
    bool slower(const Layout &variant,
                const std::optional<double> &fifth) const {
      const std::optional<double> &counterpart =
          step[variant.sequenceParallel];
      return recomputes(variant) && counterpart &&
             slowerThan(*counterpart, fifth);
    }
  };

  void merge(Outcome outcome) {
    for (const auto &[arena, layout] : outcome.tooLarge)
      noteTooLarge(layout, arena);
    if (outcome.candidate) {
      candidates_.push_back(std::move(*outcome.candidate));
      ++fitting_;
    } else if (outcome.refusal) {
      ++refused_;
      noteRefusal(outcome.refusal->first, outcome.refusal->second);
    } else if (outcome.slower) {
      ++slower_;
    } else {
      ++tooLarge_;
    }
  }

  /// `layout` weighed at its depth from its shallowest compile, or, where
  /// it does not fit, its memory-saving variants (placeVariants), those
  /// slower than `fifth` left out.
  StatusOr<Outcome> placeFamily(const Layout &layout, WeighedLayout shallowest,
                                const std::optional<double> &fifth) {
    if (shallowest.bounded) {
      // (its bound within the margin: weighed as the others were, and left
      // out as they are where slower there)
      StatusOr<WeighedLayout> weighed = weighShallowest(layout);
      if (!weighed)
        return weighed.takeStatus();
      shallowest = std::move(*weighed);
      if (shallowest.ok && slowerThan(shallowest.figures.step, fifth)) {
        Outcome outcome;
        outcome.slower = true;
        return outcome;
      }
    }
    // (those the rule book accepts: sequence parallelism needs a sequence
    // that tp divides)
    std::deque<Layout> variants;
    for (const Layout &variant : cost::memorySavingVariants(layout))
      if (verify(variant, request_.model,
                 {request_.globalBatch, request_.seqLen})
              .empty())
        variants.push_back(variant);
    StatusOr<WeighedLayout> base = weighDeeper(layout, std::move(shallowest));
    if (!base)
      return base.takeStatus();
    Outcome outcome;
    if (!base->ok) {
      outcome.refusal = {layout, base->why};
      return outcome;
    }
    if (fits(base->figures.arena(), base->exact)) {
      outcome.candidate =
          Candidate{layout, std::move(base->figures), base->exact, base->bound,
                    std::move(variants)};
      return outcome;
    }
    outcome.tooLarge.push_back({base->figures.arena(), layout});
    // Its persistent state alone over the limit: so with any variant.
    if (!fits(base->figures.mostPersistent(), base->exact))
      return outcome;
    Known known;
    known.note(layout, base->figures.step);
    return placeVariants(std::move(variants), fifth, known, std::move(outcome));
  }

  /// The first of `variants` (least costly first) that fits, trying the
  /// last (which saves the most) first: if it does not fit, none does.
  /// Those slower than `fifth` are left out: at their shallowest depth, or
  /// by what is `known` of their counterparts that recompute nothing.
  StatusOr<Outcome> placeVariants(std::deque<Layout> variants,
                                  const std::optional<double> &fifth,
                                  Known known, Outcome outcome) {
    // (not in an exhaustive search, the reference that these bounds are
    // held to)
    auto dropSlower = [&] {
      if (request_.exhaustive)
        return;
      const size_t before = variants.size();
      variants.erase(std::remove_if(variants.begin(), variants.end(),
                                    [&](const Layout &variant) {
                                      return known.slower(variant, fifth);
                                    }),
                     variants.end());
      outcome.slower |= variants.size() < before;
    };
    dropSlower();
    if (variants.empty())
      return outcome;
    const Layout most = variants.back();
    variants.pop_back();
    StatusOr<WeighedLayout> saving = weighVariant(most, fifth);
    if (!saving)
      return saving.takeStatus();
    // (slower: its shallowest arena, which its depth's is no less than)
    if (!saving->ok ||
        !fits(saving->figures.arena(), saving->exact || saving->slower)) {
      if (saving->ok)
        outcome.tooLarge.push_back({saving->figures.arena(), most});
      return outcome;
    }
    outcome.slower |= saving->slower;
    while (!variants.empty()) {
      dropSlower();
      if (variants.empty())
        break;
      const Layout variant = variants.front();
      variants.pop_front();
      StatusOr<WeighedLayout> weighed = weighVariant(variant, fifth);
      if (!weighed)
        return weighed.takeStatus();
      if (weighed->ok)
        known.note(variant, weighed->figures.step);
      if (weighed->ok && weighed->slower) {
        outcome.slower = true;
        continue;
      }
      if (weighed->ok && fits(weighed->figures.arena(), weighed->exact)) {
        if (!saving->slower)
          variants.push_back(most);
        outcome.candidate =
            Candidate{variant, std::move(weighed->figures), weighed->exact,
                      weighed->bound, std::move(variants)};
        return outcome;
      }
      if (weighed->ok)
        outcome.tooLarge.push_back({weighed->figures.arena(), variant});
    }
    if (saving->slower)
      return outcome;
    outcome.candidate = Candidate{
        most, std::move(saving->figures), saving->exact, saving->bound, {}};
    return outcome;
  }

  /// fn(0), ..., fn(n - 1), on every core.
  template <typename Fn> void inParallel(size_t n, Fn fn) {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next++) < n;)
        fn(i);
    };
    std::vector<std::thread> threads;
    for (size_t t = 1; t < std::min<size_t>(workers(), n); ++t)
      startOrRun(threads, work);
    work();
    for (std::thread &thread : threads)
      thread.join();
  }

  static size_t workers() {
    return std::max(1u, std::min(std::thread::hardware_concurrency(), 8u));
  }

  /// The fifth fastest step of `candidates`, once there are five.
  static std::optional<double>
  fifthFastest(const std::vector<Candidate> &candidates) {
    if (candidates.size() < kShown)
      return std::nullopt;
    std::vector<double> steps;
    for (const Candidate &c : candidates)
      steps.push_back(c.figures.step);
    std::nth_element(steps.begin(), steps.begin() + (kShown - 1), steps.end());
    return steps[kShown - 1];
  }

  /// One compile of `layout` into representative ranks, predicted: the
  /// first `layers` layers in `split`, running `microbatches` (0: the
  /// layout's).
  StatusOr<Weighed> compileAndPredict(const Layout &layout, int64_t layers,
                                      const std::vector<int64_t> &split,
                                      int64_t microbatches = 0) {
    if (layers)
      ++shallow;
    if (microbatches)
      ++fewerMicrobatches;
    Weighed out;
    StatusOr<std::optional<Priced>> priced =
        compileAndPrice(layout, layers, split, microbatches, out.why);
    if (!priced || !*priced)
      return priced ? StatusOr<Weighed>(std::move(out)) : priced.takeStatus();
    const auto &[plan, costs] = **priced;
    // (the step, and the launches of the rank that ends last alone)
    StatusOr<cost::StepSummary> summary = cost::summarizeStep(plan, costs);
    if (!summary)
      return summary.takeStatus().withContext(layoutFlags(layout));
    const cost::StepTimeline &timeline = summary->timeline;
    out.ok = true;
    noteMemory(plan, out.figures);
    out.figures.step = timeline.seconds();
    out.bound = cost::stepBound(plan, timeline);
    return out;
  }

  /// A compiled candidate and what its launches cost.
  struct Priced {
    Plan plan;
    cost::LaunchCosts costs;
  };

  /// One compile of `layout` into representative ranks (the first `layers`
  /// layers in `split`, running `microbatches`; 0: the layout's), priced;
  /// none, with `why`, where the compiler refuses it.
  StatusOr<std::optional<Priced>>
  compileAndPrice(const Layout &layout, int64_t layers,
                  const std::vector<int64_t> &split, int64_t microbatches,
                  std::string &why) {
    ++compiled;
    StatusOr<Plan> plan =
        compiler_.representatives(layout, layers, split, microbatches);
    if (!plan) {
      why = plan.status().message();
      return std::optional<Priced>();
    }
    StatusOr<cost::LaunchCosts> costs =
        cost::priceLaunches(*plan, calibration_);
    if (!costs)
      return costs.takeStatus().withContext(layoutFlags(layout));
    return std::optional<Priced>(Priced{std::move(*plan), std::move(*costs)});
  }

  /// Each rank's memory on the device (its arena and kernel scratch) and
  /// persistent state.
  void noteMemory(const Plan &plan, cost::LayoutFigures &figures) const {
    const std::vector<uint64_t> scratch =
        compiler_.scratch ? compiler_.scratch(plan) : std::vector<uint64_t>();
    for (size_t r = 0; r < plan.ranks.size(); ++r) {
      const RankPlan &rank = plan.ranks[r];
      figures.arenas.push_back(rank.arenaBytes +
                               (r < scratch.size() ? scratch[r] : 0));
      const RankMemory memory = rankMemory(rank);
      figures.persistent.push_back(memory.parameters + memory.parameterCopies +
                                   memory.gradients + memory.optimizerState);
    }
  }

  /// The micro-batches a deep pipeline's step is bounded from: the fewest
  /// its schedule takes from 3 on (an interleaved schedule's whole groups),
  /// where it runs kBoundedFrom times as many or more; none otherwise.
  std::optional<int64_t> boundingMicrobatches(const Layout &layout) const {
    if (request_.exhaustive || layout.pp < 2)
      return std::nullopt;
    const int64_t group =
        layout.vp < 2 ? 1 : std::max(layout.pp, layout.ppGroupSize);
    const int64_t fewest = (3 + group - 1) / group * group;
    if (fewest * kBoundedFrom > layout.microbatches)
      return std::nullopt;
    return fewest;
  }

  /// `layout` compiled with `microbatches` (boundingMicrobatches), its step
  /// bounded from below at its own (StepLowerBound.h); not `ok` where that
  /// compile is refused.
  StatusOr<WeighedLayout> boundStep(const Layout &layout,
                                    int64_t microbatches) {
    ++bounded;
    WeighedLayout out;
    out.bounded = true;
    StatusOr<std::optional<Priced>> priced =
        compileAndPrice(layout, 0, {}, microbatches, out.why);
    if (!priced || !*priced)
      return priced ? StatusOr<WeighedLayout>(std::move(out))
                    : priced.takeStatus();
    const auto &[plan, costs] = **priced;
    StatusOr<double> step =
        cost::stepLowerBound(plan, costs, layout.microbatches);
    if (!step)
      return step.takeStatus().withContext(layoutFlags(layout));
    out.ok = true;
    noteMemory(plan, out.figures);
    out.figures.step = *step;
    return out;
  }

  /// The two micro-batch counts `layout` is screened from, where they are
  /// fewer together than its own (its compile's launches grow with them):
  /// from (vp + 1) units of them on, and a unit more, a unit being pp (or
  /// the interleaved schedule's group; 1 without a pipeline). Past that
  /// many, a stage keeps no more micro-batches in flight (1F1B's pp; the
  /// interleaved warm-up's up to (vp + 1) x pp (micro-batch, chunk) pairs),
  /// and one micro-batch more costs what the last did.
  std::optional<std::pair<int64_t, int64_t>>
  screeningMicrobatches(const Layout &layout) const {
    if (request_.exhaustive)
      return std::nullopt;
    const int64_t unit =
        layout.pp < 2 ? 1 : std::max(layout.pp, layout.ppGroupSize);
    const int64_t fewer = (layout.vp + 1) * unit, few = fewer + unit;
    if (fewer + few >= layout.microbatches)
      return std::nullopt;
    return std::make_pair(fewer, few);
  }

  /// `layout` predicted (its first `layers` layers in `split`): compiled,
  /// or, where it runs many micro-batches and `exact` is not asked for,
  /// extrapolated from compiles of fewer (`estimated`).
  StatusOr<Weighed> predict(const Layout &layout, int64_t layers,
                            const std::vector<int64_t> &split, bool exact,
                            bool &estimated) {
    const std::optional<std::pair<int64_t, int64_t>> counts =
        exact ? std::nullopt : screeningMicrobatches(layout);
    estimated = counts.has_value();
    if (!counts)
      return compileAndPredict(layout, layers, split);
    StatusOr<Weighed> fewer =
        compileAndPredict(layout, layers, split, counts->first);
    if (!fewer || !fewer->ok)
      return fewer;
    StatusOr<Weighed> few =
        compileAndPredict(layout, layers, split, counts->second);
    if (!few || !few->ok)
      return few;
    few->figures =
        cost::extrapolateMicrobatches(fewer->figures, few->figures,
                                      counts->first, counts->second,
                                      layout.microbatches);
    return few;
  }

  /// `layout` compiled `fewer` layers a virtual stage shallower than
  /// `split` (of `numLayers`); an estimate of the shallower model.
  StatusOr<Weighed> compileShallower(const Layout &layout, int64_t numLayers,
                                     const std::vector<int64_t> &split,
                                     int64_t fewer) {
    std::vector<int64_t> stages = split;
    for (int64_t &layers : stages)
      layers -= fewer;
    bool estimated = false;
    return predict(layout, numLayers - fewer * int64_t(split.size()),
                   layout.pp > 1 ? stages : std::vector<int64_t>{},
                   /*exact=*/false, estimated);
  }

  /// `layout` at its shallowest: two layers in its smallest virtual stage,
  /// or at its depth where the model is shallow (or the search exhaustive);
  /// with `boundDeep`, a deep pipeline's bound instead where it has one
  /// (boundingMicrobatches), or where its compile is refused, at its depth.
  StatusOr<WeighedLayout> weighShallowest(const Layout &layout,
                                          bool boundDeep = false) {
    WeighedLayout out;
    if (!request_.exhaustive) {
      if (Status status = compiler_.split(layout, out.numLayers, out.split);
          !status) {
        out.why = status.message();
        return out;
      }
    }
    const int64_t fewest =
        out.split.empty()
            ? 0
            : *std::min_element(out.split.begin(), out.split.end());
    if (fewest < kShallowFrom) {
      if (const std::optional<int64_t> few = boundingMicrobatches(layout);
          few && boundDeep) {
        StatusOr<WeighedLayout> bound = boundStep(layout, *few);
        if (!bound || bound->ok)
          return bound;
      }
      return weighAtDepth(layout, request_.exhaustive);
    }
    StatusOr<Weighed> weighed =
        compileShallower(layout, out.numLayers, out.split, fewest - 2);
    if (!weighed)
      return weighed.takeStatus();
    static_cast<Weighed &>(out) = std::move(*weighed);
    out.fewer = fewest - 2;
    return out;
  }

  /// `layout` at the model's depth: compiled (`exact`), or where it runs
  /// many micro-batches and `exact` is not asked for, extrapolated along
  /// them.
  StatusOr<WeighedLayout> weighAtDepth(const Layout &layout, bool exact) {
    bool estimated = false;
    StatusOr<Weighed> whole = predict(layout, 0, {}, exact, estimated);
    if (!whole)
      return whole.takeStatus();
    WeighedLayout out;
    static_cast<Weighed &>(out) = std::move(*whole);
    out.exact = !estimated;
    return out;
  }

  /// `layout` at its depth from its shallowest: exact already, or
  /// extrapolated along the line through one more layer a virtual stage
  /// (k more where every k-th layer is recomputed whole).
  StatusOr<WeighedLayout> weighDeeper(const Layout &layout,
                                      WeighedLayout shallowest) {
    // (a deeper model's arena is larger: one over the limit stays over)
    if (shallowest.fewer == 0 || !shallowest.ok ||
        !fits(shallowest.figures.arena(), /*exact=*/true))
      return shallowest;
    // Every k-th layer recomputed whole (--recompute-layers every:k): the
    // line runs through k layers more, a whole period of the layers' cost.
    const int64_t period = std::min(
        shallowest.fewer,
        layout.recomputeLayers > 1 ? layout.recomputeLayers : int64_t(1));
    StatusOr<Weighed> deeper =
        compileShallower(layout, shallowest.numLayers, shallowest.split,
                         shallowest.fewer - period);
    if (!deeper)
      return deeper.takeStatus();
    if (!deeper->ok) {
      static_cast<Weighed &>(shallowest) = std::move(*deeper);
      return shallowest;
    }
    shallowest.figures =
        cost::extrapolateDepth(shallowest.figures, deeper->figures,
                               shallowest.fewer - period, period);
    shallowest.bound = deeper->bound;
    return shallowest;
  }

  /// A variant at its depth (`weigh`), or at its shallowest (or by its
  /// bound) where it is slower there than `fifth` (`slower`).
  StatusOr<WeighedLayout> weighVariant(const Layout &layout,
                                       const std::optional<double> &fifth) {
    if (request_.exhaustive)
      return weighAtDepth(layout, /*exact=*/true);
    StatusOr<WeighedLayout> shallowest =
        weighShallowest(layout, /*boundDeep=*/fifth.has_value());
    if (!shallowest)
      return shallowest.takeStatus();
    if (shallowest->ok && slowerThan(shallowest->figures.step, fifth)) {
      shallowest->slower = true;
      return shallowest;
    }
    if (shallowest->bounded) {
      shallowest = weighShallowest(layout);
      if (!shallowest)
        return shallowest.takeStatus();
    }
    return weighDeeper(layout, std::move(*shallowest));
  }

  /// `layout` at its depth: compiled there (`exact`), or extrapolated.
  StatusOr<WeighedLayout> weigh(const Layout &layout, bool exact) {
    if (exact)
      return weighAtDepth(layout, /*exact=*/true);
    StatusOr<WeighedLayout> shallowest = weighShallowest(layout);
    if (!shallowest)
      return shallowest.takeStatus();
    return weighDeeper(layout, std::move(*shallowest));
  }

  const PlannerRequest &request_;
  const cost::Calibration &calibration_;
  const PlannerCompiler &compiler_;
  const PlannerObserver &observer_;
  std::chrono::steady_clock::time_point start_;
  double lastProgress_ = 0.0;
  std::vector<Candidate> candidates_;
  size_t fitting_ = 0, tooLarge_ = 0, refused_ = 0, slower_ = 0;
  std::string firstRefusal_;
  std::optional<std::pair<uint64_t, Layout>> closest_;
};

} // namespace

StatusOr<PlannedLayout> mlt::planLayout(const PlannerRequest &request,
                                        const cost::Calibration &calibration,
                                        const std::string &calibrationSource,
                                        const PlannerCompiler &compiler,
                                        const PlannerObserver &observer) {
  // The user's own options as given, with the planner's at their
  // defaults: a refusal of those is the user's to fix where no layout
  // the planner chooses mends it (a bf16 gradient reduction refused at
  // zero 0 is kept for the ZeRO-2 layouts, the others refused by its rule).
  const StepShape step{request.globalBatch, request.seqLen};
  std::vector<Violation> own = verify(request.base, request.model, step);
  // The candidates the rule book accepts; the others counted by rule.
  PlannerReport report;
  std::vector<Layout> layouts;
  const std::vector<Layout> all =
      cost::enumerateLayouts(
          {request.gpus, request.globalBatch, request.seqLen, request.base});
  for (const Layout &layout : all) {
    std::vector<Violation> violations = verify(layout, request.model, step);
    if (violations.empty()) {
      layouts.push_back(layout);
      continue;
    }
    const Violation &first = violations.front();
    auto it = std::find_if(report.rules.begin(), report.rules.end(),
                           [&](const PlannerReport::RuleRefusals &r) {
                             return r.rule == first.rule;
                           });
    if (it == report.rules.end())
      report.rules.push_back(
          {first.rule, 1, layoutFlags(layout) + ": " + first.text()});
    else
      ++it->count;
  }
  if (layouts.empty() && !own.empty())
    return errorf("--layout auto: ", own.front().text());
  Planner planner(request, calibration, compiler, observer);
  MLT_RETURN_IF_ERROR(planner.screen(layouts));
  StatusOr<std::vector<Candidate>> confirmed = planner.confirm();
  if (!confirmed)
    return confirmed.takeStatus();
  const std::vector<Candidate> rest = planner.unconfirmed();

  report.gpus = request.gpus;
  report.globalBatch = request.globalBatch;
  report.seqLen = request.seqLen;
  report.arenaLimit = request.arenaLimit;
  report.limitText = request.limitText;
  report.calibrationSource = calibrationSource;
  report.layouts = all.size();
  report.refusedByRules = all.size() - layouts.size();
  report.compiled = planner.compiled.load();
  report.shallow = planner.shallow.load();
  report.fewerMicrobatches = planner.fewerMicrobatches.load();
  report.bounded = planner.bounded.load();
  report.seconds = planner.elapsed();
  report.fit = planner.fitting();
  report.tooLarge = planner.tooLarge();
  report.refusedByCompiler = planner.refused();
  report.slower = planner.slower();
  auto ranked = [](const Candidate &c) {
    return PlannerReport::Ranked{c.layout, c.figures.step, c.exact,
                                 c.figures.arena(), c.bound};
  };
  for (size_t i = 0; i < std::min(kShown, confirmed->size()); ++i)
    report.fastest.push_back(ranked((*confirmed)[i]));
  // The others: confirmed past the fifth, and estimates.
  report.more =
      confirmed->size() - std::min(kShown, confirmed->size()) + rest.size();
  if (report.more)
    report.slowest =
        ranked(!rest.empty() && (confirmed->size() <= kShown ||
                                 rest.back().figures.step >
                                     confirmed->back().figures.step)
                   ? rest.back()
                   : confirmed->back());
  if (observer.ranked)
    observer.ranked(report);
  if (confirmed->empty()) {
    if (planner.closest())
      return errorf("--layout auto: no layout of ", request.gpus,
                    " GPUs fits: the least memory is ",
                    formatBytes(planner.closest()->first), " (",
                    layoutFlags(planner.closest()->second), "), the limit ",
                    formatBytes(request.arenaLimit));
    if (layouts.empty())
      return errorf("--layout auto: the rule book refuses every layout of ",
                    request.gpus,
                    " GPUs; the first: ", report.rules.front().first);
    return errorf("--layout auto: the compiler refused every layout of ",
                  request.gpus, " GPUs; the first: ", planner.firstRefusal());
  }
  const Layout &chosen = confirmed->front().layout;
  PlannedLayout planned;
  planned.layout = chosen;
  StatusOr<Plan> plan = compiler.whole(chosen, planned.bytes);
  if (!plan)
    return plan.takeStatus().withContext(layoutFlags(chosen));
  planned.plan = std::move(*plan);
  return planned;
}

std::string mlt::formatPlannerReport(const PlannerReport &report) {
  std::string text;
  appendf(text,
          "layout auto: %lld GPUs, global batch %lld x %lld, %s; "
          "calibration: %s\n",
          (long long)report.gpus, (long long)report.globalBatch,
          (long long)report.seqLen,
          report.arenaLimit ? report.limitText.c_str() : "no memory limit",
          report.calibrationSource.c_str());
  std::string shallow, slower;
  std::vector<std::string> estimates;
  if (report.shallow)
    estimates.push_back(std::to_string(report.shallow) +
                        " of them shallow, extrapolated to the model's depth");
  if (report.fewerMicrobatches)
    estimates.push_back(
        std::to_string(report.fewerMicrobatches) +
        (estimates.empty() ? " of them" : "") +
        " with fewer micro-batches, extrapolated to the layout's");
  if (report.bounded)
    estimates.push_back(std::to_string(report.bounded) +
                        (estimates.empty() ? " of them" : "") +
                        (report.bounded == 1
                             ? " with a deep pipeline's fewest micro-batches, "
                               "bounding its step"
                             : " with deep pipelines' fewest micro-batches, "
                               "bounding their steps"));
  for (size_t i = 0; i < estimates.size(); ++i)
    shallow += (i ? "; " : " (") + estimates[i];
  if (!estimates.empty())
    shallow += ")";
  if (report.slower)
    slower = ", " + std::to_string(report.slower) +
             " slower than the fifth fastest (at their depth or a shallower "
             "one)";
  appendf(text,
          "  %zu layouts, %zu refused by the rule book, %zu compiled%s "
          "in %.1f s: %zu fit, %zu do not fit, %zu refused by the "
          "compiler%s\n",
          report.layouts, report.refusedByRules, report.compiled,
          shallow.c_str(), report.seconds, report.fit, report.tooLarge,
          report.refusedByCompiler, slower.c_str());
  for (const PlannerReport::RuleRefusals &refused : report.rules)
    appendf(text, "  refused by rule %s: %zu, such as %s\n",
            refused.rule.c_str(), refused.count, refused.first.c_str());
  if (report.fastest.empty())
    return text;
  const double tokens = double(report.globalBatch) * double(report.seqLen);
  appendf(text, "  %-4s %-48s %11s %10s %11s  %s\n", "rank", "layout", "step",
          "tokens/s", "memory", "bound by");
  for (size_t i = 0; i < report.fastest.size(); ++i) {
    const PlannerReport::Ranked &c = report.fastest[i];
    char step[32], rate[32], bound[64];
    std::snprintf(step, sizeof step, "%.2f ms", c.step * 1e3);
    std::snprintf(rate, sizeof rate, "%.0f", tokens / c.step);
    std::snprintf(bound, sizeof bound, "%s (%.0f%% of the step)",
                  c.bound.what.c_str(), c.bound.share * 100.0);
    appendf(text, "  %-4zu %-48s %11s %10s %11s  %s\n", i + 1,
            layoutFlags(c.layout).c_str(), step, rate,
            formatBytes(c.arena).c_str(), bound);
  }
  if (report.more)
    appendf(text, "  ... %zu more, the slowest %.2f ms%s (%s)\n", report.more,
            report.slowest.step * 1e3, report.slowest.exact ? "" : " estimated",
            layoutFlags(report.slowest.layout).c_str());
  appendf(text, "chose %s\n",
          layoutFlags(report.fastest.front().layout).c_str());
  return text;
}
