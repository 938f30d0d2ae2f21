//===- PlanTestUtil.h - helpers of the runtime execution tests --*- C++ -*-===//
//
// Part of mlt. The test plans of TestPlans.h, a scratch directory per test,
// token files and a normwise error measure.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEEXEC_PLANTESTUTIL_H
#define MLT_UNITTESTS_RUNTIMEEXEC_PLANTESTUTIL_H

#include "TestPlans.h"

#include "gtest/gtest.h"

#include "../Support/ScratchDirTest.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace mlt::rt::testing {

using ::mlt::testing::ScratchDirTest;

/// The error message of parsing `plan` after serializing it ("" if it
/// parses).
inline std::string parseError(const Plan &plan) {
  std::string bytes = serializePlan(plan);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "plan.mltplan");
  return parsed ? std::string() : parsed.status().message();
}

/// Writes `tokens` as a little-endian .u16 token file.
inline void writeTokenFile(const std::string &path,
                           const std::vector<uint16_t> &tokens) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(tokens.data()),
            std::streamsize(tokens.size() * sizeof(uint16_t)));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

/// Writes the training tests' token file: token i is i % 16 with a few
/// irregularities, so the next token is mostly a function of the current
/// one, which the tiny model can learn.
inline void writeLearnableTokens(const std::string &path) {
  std::vector<uint16_t> tokens(800);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint16_t(i % 16);
  for (size_t i = 0; i < tokens.size(); i += 37)
    tokens[i] = uint16_t((i * 7) % 16);
  writeTokenFile(path, tokens);
}

/// Normwise relative difference max|a - b| / max|b| (0 when both are 0).
template <typename A, typename B>
double relDiff(const std::vector<A> &a, const std::vector<B> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  if (a.size() != b.size())
    return 1e30;
  return den == 0 ? num : num / den;
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEEXEC_PLANTESTUTIL_H
