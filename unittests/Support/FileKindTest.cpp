//===- FileKindTest.cpp - outputs checked before a run writes them ---------===//
//
// Part of mlt. An output's directory is written once before the first step
// (probeOutputPath: a file created and removed, nothing left), and a save
// that cannot fit its file system is refused by checkFreeSpace.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/FileKind.h"

#include "ScratchDirTest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace mlt;

namespace {

using FileKindTest = mlt::testing::ScratchDirTest;

TEST_F(FileKindTest, ProbesLeaveNothing) {
  const std::string out = (dir_ / "ckpt").string();
  EXPECT_TRUE(probeOutputPath(out, /*directory=*/true).isOk());
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
  std::filesystem::create_directory(out);
  EXPECT_TRUE(probeOutputPath(out, /*directory=*/true).isOk());
  EXPECT_TRUE(std::filesystem::is_empty(out));
  EXPECT_TRUE(probeOutputPath((dir_ / "log.json").string(), false).isOk());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);
  Status missing = probeOutputPath((dir_ / "no" / "x").string(), false);
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.message(), (dir_ / "no" / "x").string() +
                                   ": cannot write in " +
                                   (dir_ / "no").string() +
                                   ": No such file or directory");
}

TEST_F(FileKindTest, FreeSpace) {
  const std::string out = (dir_ / "ckpt").string();
  EXPECT_TRUE(checkFreeSpace(out, true, 1, "a checkpoint").isOk());
  Status full = checkFreeSpace(out, true, uint64_t(1) << 62, "a checkpoint");
  ASSERT_FALSE(full.isOk());
  EXPECT_EQ(full.message().rfind(out + ": a checkpoint needs about 4194304.00 "
                                       "TiB, but its file system has ",
                                 0),
            0u)
      << full.message();
}

} // namespace
