//===- LayoutOptions.h - the layout's options, one table --------*- C++ -*-===//
//
// Part of mlt. Every field of a Layout as an option with one name, one
// value syntax, one help text and one parser: mlt-run spells it `--NAME
// VALUE` (`--NAME` alone for a switch), `mlt-opt --mlt-train-pipeline`
// spells it `NAME=VALUE` (`NAME` alone for a switch), and both hand the
// text to the same parser, so a value means the same and is refused in the
// same words everywhere. The planner prints a layout with `layoutFlags`,
// the pipeline's option string is `layoutOptionText`. Adding a field to
// Layout is adding its row here (and its rules in LayoutRules.cpp).
//
// A parser checks the value alone (a number, one of the names); whether a
// layout holds together, and suits a model, is the rule book's.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LAYOUT_LAYOUTOPTIONS_H
#define MLT_LAYOUT_LAYOUTOPTIONS_H

#include "mlt/Layout/Layout.h"
#include "mlt/Support/Status.h"

#include <string>
#include <string_view>
#include <vector>

namespace mlt {

/// Where an option is listed in usage texts.
enum class LayoutSection : uint8_t {
  Mesh,
  Pipeline,
  Memory,
  Precision,
  Overlap
};

/// What a plan file says of an option: a plan records the mesh, the ZeRO
/// stage, the micro-batches and the precision (a value given with a plan
/// must agree with it), and fixes the rest in its programs (a value given
/// with a plan is refused).
enum class PlanRecord : uint8_t { Recorded, Fixed };

/// One option of the layout.
struct LayoutOption {
  /// "tp": mlt-run's `--tp`, mlt-opt's `tp=`.
  const char *name;
  /// The value's syntax for usage texts ("N", "0|1|2"); empty for a switch
  /// (given alone; `NAME=on|off` in mlt-opt).
  const char *value;
  /// What it does, for usage texts (one paragraph).
  const char *help;
  LayoutSection section;
  PlanRecord plan;
  /// Whether `--layout auto` chooses it (the planner's search space).
  bool plannerChooses;
  /// Sets the option in `layout` from `text`; fails with a message of the
  /// form "expected ..., got '...'" (the caller names the option).
  Status (*parse)(std::string_view text, Layout &layout);
  /// The option's value in `layout`, as parse reads it back.
  std::string (*print)(const Layout &layout);

  bool isSwitch() const { return value[0] == '\0'; }
  /// Whether `layout` has the option at its default.
  bool isDefault(const Layout &layout) const;
};

/// Every option, in the order layoutFlags prints them.
const std::vector<LayoutOption> &layoutOptions();
/// The option named `name` ("tp", without dashes); null if none.
const LayoutOption *findLayoutOption(std::string_view name);

/// Sets option `name` of `layout` from `text`. Fails with "NAME: expected
/// ..., got '...'" (`spelling` is how the caller's users write the name:
/// "--tp" for mlt-run, "tp" for mlt-opt).
Status setLayoutOption(Layout &layout, const LayoutOption &option,
                       std::string_view text, std::string_view spelling);

/// "--tp 2 --sequence-parallel --dp 2 --zero 1": the options of `layout`
/// that differ from the default, as mlt-run's flags, in table order;
/// "one GPU" for the default layout.
std::string layoutFlags(const Layout &layout);
/// "tp=2 sequence-parallel dp=2 zero=1": the same as mlt-opt's options;
/// empty for the default layout.
std::string layoutOptionText(const Layout &layout);
/// The layout `text` (layoutOptionText's form: space-separated NAME=VALUE
/// or switch NAME) names, starting from the default layout.
StatusOr<Layout> parseLayoutOptionText(std::string_view text);

/// The layout options as mlt-run's usage text: the options of `section`,
/// each `--NAME VALUE` with its help wrapped at 80 columns.
std::string layoutUsage(LayoutSection section);

} // namespace mlt

#endif // MLT_LAYOUT_LAYOUTOPTIONS_H
