//===- LayoutRules.h - the rule book of layouts -----------------*- C++ -*-===//
//
// Part of mlt. The one rule book that says whether a layout suits a model
// and a step: `verify(layout, model, step)` returns every rule the layout
// breaks, each as a one-line message naming the rule. mlt-run calls it
// before compiling, `mlt-opt --mlt-train-pipeline` as its first pass
// (mlt-verify-layout), and the planner's enumerator keeps only the layouts
// it accepts; so a layout is refused in the same words by each.
//
// The rule book is exact: a layout it accepts compiles, passes the plan
// verifier and trains as one rank does, on any model shape; a layout the
// compiler cannot build is refused here, not halfway through the passes.
// test/Property/layouts.py holds it to that over random model shapes and
// layouts. A rule that stands for a feature mlt lacks (rather than for
// what the layout means) says so in its reason.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LAYOUT_LAYOUTRULES_H
#define MLT_LAYOUT_LAYOUTRULES_H

#include "mlt/Layout/Layout.h"

#include <string>
#include <vector>

namespace mlt {

/// One rule of the book.
struct LayoutRule {
  /// "tp-divides-heads": how messages, docs and tests name it.
  const char *name;
  /// What it requires, one sentence.
  const char *statement;
  /// Why; "missing feature: ..." where it is one.
  const char *reason;
};

/// Every rule, in the order verify checks them.
const std::vector<LayoutRule> &layoutRules();

/// A rule a layout breaks.
struct Violation {
  /// The rule's name.
  std::string rule;
  /// What is wrong, in one line, naming the options by their layout names
  /// ("tp 4 does not divide the model's 6 attention heads").
  std::string message;
  /// "MESSAGE (rule NAME)": the line every tool prints.
  std::string text() const;
};

/// Every rule `layout` breaks for `model` and `step`, in rule order; empty
/// when it suits them. The rules on the model are checked where `model` is
/// known (its layers > 0), those on the step where `step`'s fields are.
std::vector<Violation> verify(const Layout &layout, const ModelShape &model,
                              const StepShape &step);

/// The rule book as text, one rule a paragraph (`mlt-run
/// --help-layout-rules`).
std::string formatLayoutRules();

} // namespace mlt

#endif // MLT_LAYOUT_LAYOUTRULES_H
