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

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace mlt::rt::testing {

/// A fresh, empty directory for one test, removed with everything in it
/// afterwards.
class ScratchDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    const ::testing::TestInfo *info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    std::random_device rd;
    dir_ =
        std::filesystem::temp_directory_path() /
        ("mlt-io-" + std::string(info->test_suite_name()) + "-" + info->name() +
         "-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  /// A path inside the scratch directory.
  std::string path(const std::string &name) const {
    return (dir_ / name).string();
  }

  /// Names of the entries of `directory`, sorted.
  static std::vector<std::string> listDir(const std::string &directory) {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(directory))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path dir_;
};

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
