//===- PlanFuzzer.cpp - libFuzzer target: the plan loader -----------------===//
//
// Part of mlt. Feeds each input to parsePlan twice: as it is (the
// identifier and the checksum trailer, which refuse nearly every mutation),
// and sealed with a fresh checksum (in place of a matching trailer the input
// ends with), so that mutations reach what lies behind the checksum: the
// format version, FlatBuffers' verifier, decoding, and every semantic check
// of PlanVerifier.cpp, TransferCheck.cpp and TrainingContract.cpp. Whatever
// the bytes, the loader must return a Status; a crash, a hang, a leak,
// undefined behaviour or an allocation past -malloc_limit_mb is a bug in it.
// A plan that loads is printed (every field walked, as --print-plan does)
// and must survive a round trip: serialized again, it loads and prints the
// same.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/MemoryReport.h"
#include "mlt/Plan/Plan.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::rt;

namespace {

std::string printed(const Plan &plan) {
  std::ostringstream os;
  printPlan(plan, os);
  printSchedule(plan, os);
  printMemoryReport(plan, os);
  return os.str();
}

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "mlt-fuzz-plan: %s\n%s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)parsePlan(data, size, "input");

  size_t content = size;
  if (std::optional<PlanTrailer> trailer = readPlanTrailer(data, size);
      trailer && trailer->matches())
    content = trailer->contentSize;
  std::string sealed(reinterpret_cast<const char *>(data), content);
  appendPlanChecksum(sealed);
  StatusOr<Plan> plan = parsePlan(sealed.data(), sealed.size(), "input");
  if (!plan)
    return 0;

  const std::string text = printed(*plan);
  const std::string again = serializePlan(*plan);
  StatusOr<Plan> reread = parsePlan(again.data(), again.size(), "round trip");
  if (!reread)
    fail("a plan that loaded does not load once serialized again:",
         reread.status().message());
  if (printed(*reread) != text)
    fail("a plan serialized again prints differently", "");
  return 0;
}
