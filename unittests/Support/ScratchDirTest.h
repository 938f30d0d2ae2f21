//===- ScratchDirTest.h - a fresh directory per test ------------*- C++ -*-===//
//
// Part of mlt. A GoogleTest fixture shared by the unit-test suites that write
// files: each test gets an empty directory of its own under the system's
// temporary directory, removed with everything in it afterwards.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_SUPPORT_SCRATCHDIRTEST_H
#define MLT_UNITTESTS_SUPPORT_SCRATCHDIRTEST_H

#include "gtest/gtest.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace mlt::testing {

class ScratchDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    const ::testing::TestInfo *info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterized suites are named "Instance/Suite": keep one path level.
    std::string name =
        std::string(info->test_suite_name()) + "-" + info->name();
    std::replace(name.begin(), name.end(), '/', '_');
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("mlt-test-" + name + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(rd()));
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

} // namespace mlt::testing

#endif // MLT_UNITTESTS_SUPPORT_SCRATCHDIRTEST_H
