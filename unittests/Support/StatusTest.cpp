//===- StatusTest.cpp - error messages are printable -----------------------===//
//
// Part of mlt. An error message may quote a damaged file's bytes (a JSON
// parser's "last read: ..."); the tools print it to a terminal, so what is
// not UTF-8 text, and control characters but newlines, comes out as \xNN.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/Status.h"

#include <gtest/gtest.h>

using namespace mlt;

namespace {

TEST(StatusTest, MessagesArePrintable) {
  EXPECT_EQ(errorf("plain, ", 3).message(), "plain, 3");
  // UTF-8 is kept: 2, 3 and 4 bytes.
  EXPECT_EQ(errorf("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80").message(),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  // A lone continuation byte, a truncated sequence, an overlong form, a
  // surrogate, past U+10FFFF, and control characters.
  EXPECT_EQ(errorf("last read: '\"checksum\xa0'").message(),
            "last read: '\"checksum\\xa0'");
  EXPECT_EQ(errorf("\xe2\x82").message(), "\\xe2\\x82");
  EXPECT_EQ(errorf("\xc0\xaf").message(), "\\xc0\\xaf");
  EXPECT_EQ(errorf("\xed\xa0\x80").message(), "\\xed\\xa0\\x80");
  EXPECT_EQ(errorf("\xf4\x90\x80\x80").message(), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(errorf("a\tb\rc\x1b[2J\x7f").message(), "a\\x09b\\x0dc\\x1b[2J\\x7f");
  // Newlines stay: several problems, a line each.
  EXPECT_EQ(errorf("one\ntwo").message(), "one\ntwo");
  EXPECT_EQ(errorf("x").withContext("file\xff").message(), "file\\xff: x");
}

} // namespace
