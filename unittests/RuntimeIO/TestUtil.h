//===- TestUtil.h - helpers for the runtime I/O tests -----------*- C++ -*-===//
//
// Part of mlt. A scratch directory per test and small file helpers shared by
// the safetensors and token data tests, which build their inputs (including
// deliberately broken files) byte by byte.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEIO_TESTUTIL_H
#define MLT_UNITTESTS_RUNTIMEIO_TESTUTIL_H

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "../Support/ScratchDirTest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace mlt::rt::testing {

using ::mlt::testing::ScratchDirTest;

/// Writes `bytes` to `path`, replacing it.
inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

/// The whole content of `path`.
inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEIO_TESTUTIL_H
