//===- MappedFileTest.cpp - data files that change while a run reads them ===//
//
// Part of mlt. A token file rewritten, grown or truncated after it was
// opened is one line naming it (checkUnchanged, which the trainer asks
// before each step), and a read past the end of a truncated file, which was
// a SIGBUS that killed the run without a word, exits 1 with one line.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/MappedFile.h"
#include "mlt/Runtime/io/TokenData.h"

#include "TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using ::testing::HasSubstr;

namespace {

class MappedFileTest : public mlt::rt::testing::ScratchDirTest {
protected:
  /// A .u16 token file of `tokens` ids 0..9, repeated.
  std::string tokenFile(size_t tokens) {
    std::vector<uint16_t> ids(tokens);
    for (size_t i = 0; i < tokens; ++i)
      ids[i] = uint16_t(i % 10);
    const std::string file = path("tokens.u16");
    mlt::rt::testing::writeBytes(
        file, std::string(reinterpret_cast<const char *>(ids.data()),
                          ids.size() * 2));
    return file;
  }
};

TEST_F(MappedFileTest, ChangesAreNamed) {
  const std::string file = tokenFile(1 << 16);
  StatusOr<TokenDataset> data = TokenDataset::open(file, 8, 16);
  ASSERT_TRUE(data) << data.status().message();
  EXPECT_TRUE(data->checkUnchanged().isOk());

  // Rewritten in place, the same size: the mapping would read new tokens.
  std::string bytes(size_t(1) << 17, '\0');
  bytes[100] = 3;
  ::usleep(20000); // (a modification time apart from the first)
  mlt::rt::testing::writeBytes(file, bytes);
  Status rewritten = data->checkUnchanged();
  ASSERT_FALSE(rewritten.isOk());
  EXPECT_EQ(rewritten.message(),
            file + ": changed while the run reads it (written since it was "
                   "opened); a data file must stay as it is while a run "
                   "trains on it");

  // Truncated.
  ASSERT_EQ(::truncate(file.c_str(), 1000), 0);
  EXPECT_EQ(data->checkUnchanged().message(),
            file + ": changed while the run reads it (1000 bytes, 131072 "
                   "when it was opened); a data file must stay as it is "
                   "while a run trains on it");
}

TEST_F(MappedFileTest, AReadPastATruncatedEndIsOneLine) {
  const std::string file = tokenFile(1 << 16);
  EXPECT_EXIT(
      {
        StatusOr<TokenDataset> data = TokenDataset::open(file, 8, 16);
        if (!data)
          std::_Exit(3);
        if (::truncate(file.c_str(), 0) != 0)
          std::_Exit(4);
        volatile int32_t token = data->token((1 << 16) - 1);
        (void)token;
        std::_Exit(5);
      },
      ::testing::ExitedWithCode(1),
      "error: .*tokens.u16: changed while the run reads it \\(truncated: a "
      "read past its new end\\)");
}

TEST_F(MappedFileTest, OtherBusErrorsAreNotOurs) {
  // A bus error outside every data file's mapping (with the handler in
  // place) keeps its default action.
  EXPECT_DEATH(
      {
        StatusOr<TokenDataset> data = TokenDataset::open(tokenFile(64), 8, 16);
        ::raise(SIGBUS);
      },
      "");
}

} // namespace
