//===- InputCheckTest.cpp - paths and JSON checked before reading ---------===//
//
// Part of mlt. FileKind.h's checks on real files of every kind (a regular
// file, a directory, a FIFO, a symbolic link and a loop of them, a missing
// path, a device), the readers refusing a FIFO at once rather than
// blocking, and JsonDepth.h's measure of nesting against a recursive
// reference on random texts.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/JsonDepth.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <sys/stat.h>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;

namespace {

/// A fresh directory holding one of each kind of path.
class InputCheckTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("mlt-input-check-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "file.u16") << "abcd";
    ASSERT_EQ(::mkfifo((dir / "fifo.u16").c_str(), 0600), 0);
    fs::create_symlink("file.u16", dir / "link.u16");
    fs::create_symlink("loop-b", dir / "loop-a");
    fs::create_symlink("loop-a", dir / "loop-b");
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string at(const char *name) const { return (dir / name).string(); }

  fs::path dir;
};

TEST_F(InputCheckTest, InputsMustBeFiles) {
  EXPECT_TRUE(checkInputPath(at("file.u16")).isOk());
  EXPECT_TRUE(checkInputPath(at("link.u16")).isOk()); // followed
  EXPECT_EQ(checkInputPath(at("fifo.u16")).message(),
            at("fifo.u16") + ": is a FIFO (named pipe), not a file");
  EXPECT_EQ(checkInputPath(at("sub")).message(),
            at("sub") + ": is a directory, not a file");
  EXPECT_TRUE(checkInputPath(at("sub"), /*directoryToo=*/true).isOk());
  EXPECT_EQ(checkInputPath(at("loop-a")).message(),
            at("loop-a") + ": is a symbolic link loop");
  EXPECT_EQ(checkInputPath(at("none")).message(),
            at("none") + ": does not exist");
  EXPECT_EQ(checkInputPath("/dev/null").message(),
            "/dev/null: is a character device, not a file");
}

TEST_F(InputCheckTest, OutputsMustNotReplaceWhatIsNotTheirs) {
  EXPECT_TRUE(checkOutputPath(at("new.json")).isOk());
  EXPECT_TRUE(checkOutputPath(at("file.u16")).isOk()); // replaced, a file
  EXPECT_TRUE(checkOutputPath(at("sub"), /*directory=*/true).isOk());
  EXPECT_EQ(checkOutputPath(at("link.u16")).message(),
            at("link.u16") +
                ": is a symbolic link, which writing a file there would "
                "replace");
  EXPECT_EQ(checkOutputPath(at("sub")).message(),
            at("sub") + ": is a directory, which writing a file there "
                        "would replace");
  EXPECT_EQ(checkOutputPath(at("file.u16"), /*directory=*/true).message(),
            at("file.u16") + ": is a file, which writing a directory "
                             "there would replace");
  EXPECT_EQ(checkOutputPath(at("none/out.json")).message(),
            at("none/out.json") + ": the directory " + at("none") +
                " does not exist");
  EXPECT_TRUE(sameFile(at("link.u16"), at("file.u16")));
  EXPECT_FALSE(sameFile(at("file.u16"), at("sub")));
}

TEST_F(InputCheckTest, ReadersRefuseAFifoAtOnce) {
  // (would block forever in open() without O_NONBLOCK)
  StatusOr<TokenDataset> data = TokenDataset::open(at("fifo.u16"), 4, 256);
  ASSERT_FALSE(data);
  EXPECT_EQ(data.status().message(),
            at("fifo.u16") + ": is a FIFO (named pipe), not a file");
  StatusOr<TensorMap> tensors = readSafeTensors(at("fifo.u16"));
  ASSERT_FALSE(tensors);
  EXPECT_NE(tensors.status().message().find("is a FIFO (named pipe)"),
            std::string::npos)
      << tensors.status().message();
}

/// The reference: nesting measured by recursive descent over brackets,
/// skipping strings.
size_t deepestNaive(std::string_view text, size_t &i, bool inside) {
  size_t deepest = 0;
  while (i < text.size()) {
    const char c = text[i++];
    if (c == '"') {
      while (i < text.size() && text[i] != '"')
        i += text[i] == '\\' ? 2 : 1;
      ++i;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, 1 + deepestNaive(text, i, true));
    } else if ((c == ']' || c == '}') && inside) {
      return deepest;
    }
  }
  return deepest;
}

TEST(JsonDepth, MatchesARecursiveReferenceOnRandomTexts) {
  std::mt19937 random(7);
  const char alphabet[] = {'[', ']', '{', '}', '"', '\\', 'a', ','};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = int(random() % 60);
    for (int k = 0; k < length; ++k)
      text += alphabet[random() % sizeof(alphabet)];
    size_t i = 0;
    const size_t deepest = deepestNaive(text, i, false);
    for (size_t limit : {size_t(0), size_t(1), size_t(2), size_t(4)})
      EXPECT_EQ(jsonTooDeepAt(text, limit).has_value(), deepest > limit)
          << text << " limit " << limit;
  }
  // (the brackets of a string do not count: 3 levels, not 7)
  EXPECT_FALSE(jsonTooDeepAt(R"({"a": "[[[[", "b": [1, [2]]})", 3));
  EXPECT_EQ(jsonTooDeepAt(R"({"a": "[[[[", "b": [1, [2]]})", 2), size_t(23));
  EXPECT_EQ(jsonTooDeepAt(R"({"a": [[1]]})", 2), size_t(7));
  EXPECT_EQ(jsonTooDeepMessage(7, 2), "nests deeper than 2 levels (at byte 7)");
}

} // namespace
