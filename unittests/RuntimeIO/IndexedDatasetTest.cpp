//===- IndexedDatasetTest.cpp - indexed datasets, samples, blends ---------===//
//
// Part of mlt. Tests the Megatron indexed dataset reader (the format pinned
// to bytes written out by hand from Megatron's _IndexWriter, every refusal
// of parseIndex, random corruptions of a valid index), the GPT-style
// sampler against a naive reference that builds each epoch's whole stream
// and cuts it, Megatron's blend assignment against a transcription of its
// loop, and --data's parsing, resolution and checkpoint descriptions.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/IndexedDataset.h"
#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Runtime/io/DocumentSampler.h"
#include "mlt/Runtime/io/TokenData.h"

#include "TestUtil.h"

#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include <sys/stat.h>

using namespace mlt;
using namespace mlt::rt;
using mlt::rt::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

//===----------------------------------------------------------------------===//
// Building indexed datasets byte by byte
//===----------------------------------------------------------------------===//

template <typename T> void put(std::string &bytes, T value) {
  bytes.append(reinterpret_cast<const char *>(&value), sizeof(T));
}

/// An index as Megatron's _IndexWriter writes it: one sequence per document
/// (preprocess_data.py without --split-sentences), pointers from lengths.
std::string indexBytes(const std::vector<int32_t> &lengths,
                       const std::vector<int64_t> &documentIndices,
                       uint8_t dtypeCode, int width) {
  std::string bytes("MMIDIDX\0\0", 9);
  put<uint64_t>(bytes, 1);
  put<uint8_t>(bytes, dtypeCode);
  put<uint64_t>(bytes, lengths.size());
  put<uint64_t>(bytes, documentIndices.size());
  for (int32_t length : lengths)
    put<int32_t>(bytes, length);
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    put<int64_t>(bytes, pointer);
    pointer += int64_t(length) * width;
  }
  for (int64_t index : documentIndices)
    put<int64_t>(bytes, index);
  return bytes;
}

/// A dataset of `documents` (one sequence each) as uint16 (code 8) or int32
/// (code 4) tokens: the .bin's bytes and the .idx's.
std::pair<std::string, std::string>
datasetBytes(const std::vector<std::vector<int32_t>> &documents,
             uint8_t dtypeCode = 8) {
  const int width = dtypeCode == 8 ? 2 : 4;
  std::string bin;
  std::vector<int32_t> lengths;
  std::vector<int64_t> documentIndices = {0};
  for (const std::vector<int32_t> &document : documents) {
    for (int32_t token : document) {
      if (width == 2)
        put<uint16_t>(bin, uint16_t(token));
      else
        put<int32_t>(bin, token);
    }
    lengths.push_back(int32_t(document.size()));
    documentIndices.push_back(int64_t(lengths.size()));
  }
  return {bin, indexBytes(lengths, documentIndices, dtypeCode, width)};
}

void writeDataset(const std::string &prefix,
                  const std::vector<std::vector<int32_t>> &documents,
                  uint8_t dtypeCode = 8) {
  auto [bin, index] = datasetBytes(documents, dtypeCode);
  writeBytes(prefix + ".bin", bin);
  writeBytes(prefix + ".idx", index);
}

StatusOr<IndexLayout> parse(const std::string &index, uint64_t binBytes) {
  return parseIndex(reinterpret_cast<const uint8_t *>(index.data()),
                    index.size(), binBytes);
}

template <typename T> std::string errorOf(const StatusOr<T> &result) {
  EXPECT_FALSE(result.isOk()) << "expected an error";
  return result.isOk() ? "" : result.status().message();
}

#define ASSERT_OK(result)                                                      \
  ASSERT_TRUE(result.isOk()) << result.status().message()

/// Random documents: lengths 0 to maxLength (some empty), ids below vocab.
std::vector<std::vector<int32_t>>
randomDocuments(std::mt19937_64 &rng, size_t count, int maxLength, int vocab) {
  std::vector<std::vector<int32_t>> documents(count);
  for (std::vector<int32_t> &document : documents) {
    document.resize(size_t(rng() % uint64_t(maxLength + 1)));
    for (int32_t &token : document)
      token = int32_t(rng() % uint64_t(vocab));
  }
  return documents;
}

//===----------------------------------------------------------------------===//
// The index format
//===----------------------------------------------------------------------===//

TEST(IndexFormatTest, MatchesMegatronsWriterByteForByte) {
  // Megatron's _IndexWriter for two documents of 3 and 2 uint16 tokens:
  // header, version 1, dtype code 8, 2 sequences, 3 document indices,
  // lengths (int32), pointers (int64 bytes), document indices (int64).
  // clang-format off
  const unsigned char expected[] = {
      'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,  // magic
      1, 0, 0, 0, 0, 0, 0, 0,                   // version
      8,                                        // uint16
      2, 0, 0, 0, 0, 0, 0, 0,                   // sequences
      3, 0, 0, 0, 0, 0, 0, 0,                   // document indices
      3, 0, 0, 0, 2, 0, 0, 0,                   // lengths
      0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, // pointers
      0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, // document indices
      2, 0, 0, 0, 0, 0, 0, 0};
  // clang-format on
  auto [bin, index] = datasetBytes({{5, 6, 7}, {8, 9}});
  EXPECT_EQ(index, std::string(reinterpret_cast<const char *>(expected),
                               sizeof(expected)));
  EXPECT_EQ(bin, std::string("\x05\0\x06\0\x07\0\x08\0\x09\0", 10));

  StatusOr<IndexLayout> layout = parse(index, bin.size());
  ASSERT_OK(layout);
  EXPECT_EQ(layout->tokenWidth, 2);
  EXPECT_FALSE(layout->tokenSigned);
  EXPECT_EQ(layout->sequenceCount, 2u);
  EXPECT_EQ(layout->numDocuments(), 2u);
  EXPECT_EQ(layout->numTokens, 5u);
  EXPECT_FALSE(layout->hasModes);
  EXPECT_EQ(layout->documentStart(0), 0u);
  EXPECT_EQ(layout->documentStart(1), 3u);
  EXPECT_EQ(layout->documentStart(2), 5u);
  EXPECT_STREQ(indexDTypeName(layout->dtypeCode), "uint16");
}

TEST(IndexFormatTest, AcceptsEmptyDocumentsSentencesAndModes) {
  // Megatron keeps a document that tokenizes to nothing (a repeated
  // document index); with --split-sentences a document has several
  // sequences; multimodal indexes end with one mode byte per sequence.
  std::string index =
      indexBytes({2, 1, 4}, {0, 0, 2, 2, 3}, /*uint8*/ 1, /*width*/ 1);
  StatusOr<IndexLayout> layout = parse(index, 7);
  ASSERT_OK(layout);
  EXPECT_EQ(layout->numDocuments(), 4u);
  EXPECT_EQ(layout->documentStart(0), 0u);
  EXPECT_EQ(layout->documentStart(1), 0u); // document 0 is empty
  EXPECT_EQ(layout->documentStart(2), 3u); // document 1: sequences 0 and 1
  EXPECT_EQ(layout->documentStart(3), 3u); // document 2 is empty
  EXPECT_EQ(layout->documentStart(4), 7u);
  index += std::string("\0\1\0", 3);
  layout = parse(index, 7);
  ASSERT_OK(layout);
  EXPECT_TRUE(layout->hasModes);
}

TEST(IndexFormatTest, RefusesEachInconsistencyWithOneLine) {
  auto [bin, good] = datasetBytes({{1, 2, 3}, {4, 5}});
  const uint64_t binBytes = bin.size();
  auto with = [&](size_t at, std::string bytes) {
    std::string index = good;
    index.replace(at, bytes.size(), bytes);
    return index;
  };
  auto u64 = [](uint64_t v) {
    std::string s;
    put<uint64_t>(s, v);
    return s;
  };
  auto i64 = [](int64_t v) {
    std::string s;
    put<int64_t>(s, v);
    return s;
  };
  const size_t lengthsAt = 34, pointersAt = 34 + 8, documentsAt = 34 + 24;

  EXPECT_THAT(errorOf(parse("", 0)), HasSubstr("too short for index magic"));
  EXPECT_THAT(errorOf(parse(with(0, "MMIDIDY"), binBytes)),
              HasSubstr("no index magic (a Megatron indexed dataset's .idx "
                        "starts with MMIDIDX\\x00\\x00)"));
  EXPECT_EQ(errorOf(parse(good.substr(0, 20), binBytes)),
            "20 bytes, shorter than the 34-byte header of an index: "
            "truncated file?");
  EXPECT_EQ(errorOf(parse(with(9, u64(2)), binBytes)),
            "index format version 2, mlt reads version 1");
  EXPECT_EQ(errorOf(parse(with(17, std::string(1, '\x09')), binBytes)),
            "unknown dtype code 9 (Megatron's codes are 1 to 8)");
  EXPECT_EQ(errorOf(parse(with(17, std::string(1, '\x06')), binBytes)),
            "dtype float64 (code 6): the .bin holds floats, not token ids");
  EXPECT_EQ(errorOf(parse(good.substr(0, good.size() - 8), binBytes)),
            "the header counts 2 sequences and 3 document indices, which "
            "take 82 bytes (84 with sequence modes); the file has 74: "
            "truncated file or a corrupt header");
  // Counts near 2^64 must not wrap into a plausible size.
  EXPECT_THAT(errorOf(parse(with(18, u64(uint64_t(1) << 62)), binBytes)),
              HasSubstr("which take 55340232221128654906 bytes"));
  EXPECT_THAT(errorOf(parse(with(26, u64(~uint64_t(0))), binBytes)),
              HasSubstr("truncated file or a corrupt header"));
  EXPECT_THAT(errorOf(parse(good + "x", binBytes)),
              HasSubstr("the file has 83"));
  EXPECT_EQ(errorOf(parse(with(26, u64(0)).substr(0, 58), binBytes)),
            "no document indices (an index has at least the leading 0)");
  EXPECT_EQ(
      errorOf(parse(with(lengthsAt + 4, std::string("\xff\xff\xff\xff", 4)),
                    binBytes)),
      "sequence 1 has length -1");
  EXPECT_EQ(errorOf(parse(with(pointersAt + 8, i64(4)), binBytes)),
            "sequence 1 starts at byte 4 of the .bin, but the sequences "
            "before it end at byte 6 (each starts where the one before "
            "ends)");
  // An index of another .bin: longer, shorter.
  EXPECT_EQ(errorOf(parse(good, binBytes - 2)),
            "sequence 1 ends at byte 10, past the end of the .bin (8 bytes): "
            "the .idx does not match its .bin");
  EXPECT_EQ(errorOf(parse(good, binBytes + 2)),
            "the sequences end at byte 10, but the .bin has 12 bytes: the "
            ".idx does not match its .bin");
  EXPECT_EQ(errorOf(parse(with(documentsAt, i64(1)), binBytes)),
            "document index 0 is 1, not 0");
  EXPECT_EQ(errorOf(parse(with(documentsAt + 8, i64(3)), binBytes)),
            "document index 1 is 3, past the 2 sequences");
  EXPECT_EQ(errorOf(parse(with(documentsAt + 16, i64(1)), binBytes)),
            "the last document index is 1, not the sequence count 2: the "
            "documents do not cover the sequences");
  std::string decreasing =
      indexBytes({3, 2}, {0, 2, 1, 2}, /*uint16*/ 8, /*width*/ 2);
  EXPECT_EQ(errorOf(parse(decreasing, binBytes)),
            "document index 2 is 1, below the one before it (2): document "
            "indices never decrease");
}

TEST(IndexFormatTest, RandomCorruptionsAreRefusedOrConsistent) {
  // Whatever bytes parseIndex accepts, the layout's documents must lie
  // within the .bin in order: the promise the sampler relies on.
  std::mt19937_64 rng(17);
  auto [bin, good] = datasetBytes(randomDocuments(rng, 12, 6, 1000));
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string index = good;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = size_t(rng() % index.size());
      index[at] = char(rng() % 4 == 0 ? 0 : rng());
    }
    if (rng() % 8 == 0)
      index.resize(size_t(rng() % (index.size() + 1)));
    const uint64_t binBytes = rng() % 4 == 0 ? rng() % 64 : bin.size();
    StatusOr<IndexLayout> layout = parse(index, binBytes);
    if (!layout)
      continue;
    ++accepted;
    ASSERT_EQ(layout->numTokens * uint64_t(layout->tokenWidth), binBytes);
    uint64_t previous = 0;
    for (uint64_t d = 0; d <= layout->numDocuments(); ++d) {
      const uint64_t start = layout->documentStart(d);
      ASSERT_GE(start, previous);
      ASSERT_LE(start, layout->numTokens);
      previous = start;
    }
    ASSERT_EQ(previous, layout->numTokens);
  }
  EXPECT_GT(accepted, 0) << "some corruptions (e.g. of a token count 0 "
                            "field) leave a valid index";
}

//===----------------------------------------------------------------------===//
// Opening datasets
//===----------------------------------------------------------------------===//

using IndexedDatasetTest = mlt::rt::testing::ScratchDirTest;

TEST_F(IndexedDatasetTest, ReadsTokensOfEveryDtype) {
  writeDataset(path("a"), {{1, 2, 3}, {}, {40000, 5}});
  StatusOr<IndexedDataset> a = IndexedDataset::open(path("a"), 65536);
  ASSERT_OK(a);
  EXPECT_EQ(a->numTokens(), 5u);
  EXPECT_EQ(a->numDocuments(), 3u);
  EXPECT_EQ(a->token(3), 40000) << "uint16 ids are unsigned";
  std::vector<int32_t> tokens(5);
  a->copyTokens(0, 5, tokens.data());
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 3, 40000, 5}));

  writeDataset(path("b"), {{100000, 7}}, /*int32*/ 4);
  StatusOr<IndexedDataset> b = IndexedDataset::open(path("b"), 128256);
  ASSERT_OK(b);
  EXPECT_EQ(b->token(0), 100000);

  // int64 (code 5) and uint8 (code 1), as other writers may choose.
  std::string bin;
  put<int64_t>(bin, 9);
  put<int64_t>(bin, 11);
  writeBytes(path("c.bin"), bin);
  writeBytes(path("c.idx"), indexBytes({2}, {0, 1}, 5, 8));
  StatusOr<IndexedDataset> c = IndexedDataset::open(path("c"), 12);
  ASSERT_OK(c);
  EXPECT_EQ(c->token(1), 11);
  writeBytes(path("d.bin"), "\x01\xff");
  writeBytes(path("d.idx"), indexBytes({2}, {0, 1}, 1, 1));
  StatusOr<IndexedDataset> d = IndexedDataset::open(path("d"), 256);
  ASSERT_OK(d);
  EXPECT_EQ(d->token(1), 255);
  EXPECT_NE(a->indexHash(), b->indexHash());
}

TEST_F(IndexedDatasetTest, RefusesBadFilesNamingThem) {
  writeDataset(path("a"), {{1, 2, 3}, {4, 5}});
  // A token id at the vocab size, in the second document.
  EXPECT_EQ(errorOf(IndexedDataset::open(path("a"), 5)),
            path("a.bin") + ": token 4 (document 1) has id 5, not below the "
                            "vocab size 5");
  writeDataset(path("neg"), {{1}, {2, -3}}, /*int32*/ 4);
  EXPECT_EQ(errorOf(IndexedDataset::open(path("neg"), 100)),
            path("neg.bin") + ": token 2 (document 1) has id -3, negative");

  // The .idx of another .bin.
  writeDataset(path("other"), {{1, 2, 3, 4}});
  std::filesystem::copy_file(path("other.bin"), path("mixed.bin"));
  std::filesystem::copy_file(path("a.idx"), path("mixed.idx"));
  EXPECT_EQ(errorOf(IndexedDataset::open(path("mixed"), 100)),
            path("mixed.idx") + ": sequence 1 ends at byte 10, past the end "
                                "of the .bin (8 bytes): the .idx does not "
                                "match its .bin");
  // A truncated .idx, a missing .bin, a .idx that is a FIFO (refused at
  // once, not waited on), an empty .idx.
  std::string index = datasetBytes({{1, 2}}).second;
  writeBytes(path("cut.bin"), std::string(4, '\0'));
  writeBytes(path("cut.idx"), index.substr(0, index.size() - 3));
  EXPECT_THAT(errorOf(IndexedDataset::open(path("cut"), 100)),
              HasSubstr("cut.idx: the header counts 1 sequences"));
  std::filesystem::remove(path("other.bin"));
  EXPECT_EQ(errorOf(IndexedDataset::open(path("other"), 100)),
            path("other.bin") + ": does not exist");
  ASSERT_EQ(::mkfifo(path("fifo.idx").c_str(), 0600), 0);
  writeBytes(path("fifo.bin"), "");
  EXPECT_EQ(errorOf(IndexedDataset::open(path("fifo"), 100)),
            path("fifo.idx") + ": is a FIFO (named pipe), not a file");
  writeBytes(path("empty.idx"), "");
  writeBytes(path("empty.bin"), "");
  EXPECT_THAT(errorOf(IndexedDataset::open(path("empty"), 100)),
              HasSubstr("empty.idx: too short for index magic"));
}

TEST_F(IndexedDatasetTest, ReportsProgressOfTheTokenCheck) {
  writeDataset(path("a"), {{1, 2, 3}, {4, 5}});
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  StatusOr<IndexedDataset> a =
      IndexedDataset::open(path("a"), 10, [&](uint64_t done, uint64_t total) {
        calls.push_back({done, total});
      });
  ASSERT_OK(a);
  EXPECT_EQ(calls, (std::vector<std::pair<uint64_t, uint64_t>>{{10, 10}}));
}

//===----------------------------------------------------------------------===//
// Samples against the naive reference
//===----------------------------------------------------------------------===//

/// The reference: epoch e's whole stream, built by concatenating the
/// documents in the epoch's order, cut into samples of S + 1 tokens that
/// start every S tokens, visited in the epoch's sample order.
std::vector<int32_t>
naiveSample(const std::vector<std::vector<int32_t>> &documents, int64_t seqLen,
            int64_t position, bool shuffle, uint64_t seed) {
  int64_t total = 0;
  for (const std::vector<int32_t> &document : documents)
    total += int64_t(document.size());
  const int64_t perEpoch = (total - 1) / seqLen;
  const int64_t epoch = position / perEpoch;
  std::vector<int64_t> order(documents.size());
  std::iota(order.begin(), order.end(), 0);
  if (shuffle)
    order = shuffledOrder(int64_t(documents.size()),
                          DocumentSampler::documentOrderSeed(seed),
                          uint64_t(epoch));
  std::vector<int32_t> stream;
  for (int64_t d : order)
    stream.insert(stream.end(), documents[size_t(d)].begin(),
                  documents[size_t(d)].end());
  int64_t sample = position % perEpoch;
  if (shuffle)
    sample = shuffledOrder(perEpoch, DocumentSampler::sampleOrderSeed(seed),
                           uint64_t(epoch))[size_t(sample)];
  return std::vector<int32_t>(stream.begin() + sample * seqLen,
                              stream.begin() + sample * seqLen + seqLen + 1);
}

TEST(DocumentSamplerTest, MatchesTheNaiveReferenceOnRandomCorpora) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t count = 1 + size_t(rng() % 30);
    std::vector<std::vector<int32_t>> documents =
        randomDocuments(rng, count, 1 + int(rng() % 40), 50000);
    std::vector<uint64_t> starts = {0};
    std::vector<int32_t> corpus;
    for (const std::vector<int32_t> &document : documents) {
      corpus.insert(corpus.end(), document.begin(), document.end());
      starts.push_back(corpus.size());
    }
    const int64_t seqLen = 1 + int64_t(rng() % 16);
    if (corpus.size() <= uint64_t(seqLen))
      continue;
    DocumentSampler sampler(count, corpus.size(), seqLen);
    const DocumentStarts documentStart = [&](uint64_t d) { return starts[d]; };
    const bool shuffle = trial % 4 != 0;
    const uint64_t seed = rng();
    // Three epochs, in order, then positions at random (each epoch rebuilt).
    std::vector<int64_t> positions(size_t(3 * sampler.samplesPerEpoch()));
    std::iota(positions.begin(), positions.end(), 0);
    for (int extra = 0; extra < 20; ++extra)
      positions.push_back(int64_t(rng() % 100000));
    std::vector<TokenSpan> spans;
    for (int64_t position : positions) {
      sampler.locate(position, shuffle, seed, documentStart, spans);
      std::vector<int32_t> sample;
      for (const TokenSpan &span : spans) {
        ASSERT_GT(span.count, 0u);
        ASSERT_LE(span.start + span.count, corpus.size());
        sample.insert(sample.end(), corpus.begin() + span.start,
                      corpus.begin() + span.start + span.count);
      }
      ASSERT_EQ(sample, naiveSample(documents, seqLen, position, shuffle, seed))
          << "trial " << trial << ", position " << position;
    }
  }
}

TEST(DocumentSamplerTest, ConsecutiveSamplesShareOneToken) {
  // Megatron's layout: sample j is stream[j*S .. j*S + S].
  std::vector<uint64_t> starts = {0, 4, 4, 11, 20};
  DocumentSampler sampler(4, 20, 3);
  EXPECT_EQ(sampler.samplesPerEpoch(), 6); // (20 - 1) / 3
  std::vector<TokenSpan> spans;
  const DocumentStarts documentStart = [&](uint64_t d) { return starts[d]; };
  sampler.locate(1, false, 0, documentStart, spans);
  EXPECT_EQ(spans, (std::vector<TokenSpan>{{3, 4}}));
  sampler.locate(5, false, 0, documentStart, spans);
  EXPECT_EQ(spans, (std::vector<TokenSpan>{{15, 4}}));
  sampler.locate(6, false, 0, documentStart, spans); // epoch 1 starts over
  EXPECT_EQ(spans, (std::vector<TokenSpan>{{0, 4}}));
}

TEST_F(IndexedDatasetTest, IndexedDataCutsTheFilesSamples) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> documents =
      randomDocuments(rng, 40, 25, 32000);
  writeDataset(path("corpus"), documents);
  StatusOr<IndexedDataset> dataset =
      IndexedDataset::open(path("corpus"), 32000);
  ASSERT_OK(dataset);
  StatusOr<std::unique_ptr<IndexedData>> data =
      IndexedData::create(std::move(*dataset), 8);
  ASSERT_OK(data);
  std::vector<int32_t> inputs(8 * 3), labels(8 * 3);
  for (int64_t step = 0; step < 200; ++step) {
    (*data)->batch(step, 3, true, 99, inputs.data(), labels.data());
    for (int64_t row = 0; row < 3; ++row) {
      std::vector<int32_t> expected =
          naiveSample(documents, 8, step * 3 + row, true, 99);
      ASSERT_EQ(std::vector<int32_t>(inputs.begin() + row * 8,
                                     inputs.begin() + row * 8 + 8),
                std::vector<int32_t>(expected.begin(), expected.end() - 1));
      ASSERT_EQ(std::vector<int32_t>(labels.begin() + row * 8,
                                     labels.begin() + row * 8 + 8),
                std::vector<int32_t>(expected.begin() + 1, expected.end()));
    }
  }
  // Too short for one sample.
  writeDataset(path("short"), {{1, 2}, {3}});
  StatusOr<IndexedDataset> shortOne = IndexedDataset::open(path("short"), 10);
  ASSERT_OK(shortOne);
  EXPECT_EQ(errorOf(IndexedData::create(std::move(*shortOne), 3)),
            path("short") + ": 3 tokens in 2 documents, fewer than one "
                            "sample of seq_len + 1 = 4");
}

//===----------------------------------------------------------------------===//
// Blends
//===----------------------------------------------------------------------===//

/// A transcription of Megatron-Core's build_blending_indices (helpers.cpp).
std::vector<std::pair<size_t, int64_t>>
megatronBlend(const std::vector<double> &weights, int64_t size) {
  std::vector<int64_t> current(weights.size(), 0);
  std::vector<std::pair<size_t, int64_t>> out;
  for (int64_t sampleIdx = 0; sampleIdx < size; ++sampleIdx) {
    double sampleIdxDouble = std::max(double(sampleIdx), 1.0);
    size_t maxErrorIndex = 0;
    double maxError = weights[0] * sampleIdxDouble - double(current[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      double error = weights[d] * sampleIdxDouble - double(current[d]);
      if (error > maxError) {
        maxError = error;
        maxErrorIndex = d;
      }
    }
    out.push_back({maxErrorIndex, current[maxErrorIndex]});
    current[maxErrorIndex] += 1;
  }
  return out;
}

TEST(BlendScheduleTest, MatchesMegatronsAssignment) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<double> weights(1 + rng() % 5);
    double sum = 0;
    for (double &w : weights)
      sum += (w = 0.05 + double(rng() % 1000) / 100.0);
    std::vector<double> normalized = weights;
    for (double &w : normalized)
      w /= sum;
    const int64_t size = 3000;
    std::vector<std::pair<size_t, int64_t>> expected =
        megatronBlend(normalized, size);
    BlendSchedule schedule(weights);
    for (int64_t i = 0; i < size; ++i)
      ASSERT_EQ(schedule.at(i), expected[size_t(i)]) << "sample " << i;
    // Out of order (a resumed run starts anywhere).
    for (int k = 0; k < 50; ++k) {
      const int64_t i = int64_t(rng() % uint64_t(size));
      ASSERT_EQ(schedule.at(i), expected[size_t(i)]) << "sample " << i;
    }
    // The proportions hold at every prefix, within a sample or two.
    std::vector<int64_t> taken(weights.size(), 0);
    for (int64_t i = 0; i < size; ++i) {
      ++taken[expected[size_t(i)].first];
      for (size_t d = 0; d < weights.size(); ++d)
        ASSERT_LE(std::fabs(double(taken[d]) - normalized[d] * double(i + 1)),
                  2.0);
    }
  }
  // Weights near the largest double: shares of 1/2, not an overflowed sum's
  // 0 each.
  EXPECT_EQ(normalizedWeights({1e308, 1e308}), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(normalizedWeights({3, 1}), (std::vector<double>{0.75, 0.25}));
  BlendSchedule huge({1.7e308, 1.7e308});
  std::string alternating;
  for (int64_t i = 0; i < 4; ++i)
    alternating += char('a' + huge.at(i).first);
  EXPECT_EQ(alternating, "abab");
  BlendSchedule pair({0.7, 0.3});
  std::string order;
  for (int64_t i = 0; i < 10; ++i)
    order += char('a' + pair.at(i).first);
  EXPECT_EQ(order, "abaabaabaa");
}

TEST_F(IndexedDatasetTest, BlendTakesEachDatasetsOwnSamples) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> a = randomDocuments(rng, 30, 20, 300),
                                    b = randomDocuments(rng, 10, 20, 300);
  writeDataset(path("a"), a);
  writeDataset(path("b"), b);
  StatusOr<OpenedData> blend =
      openTrainingData({{3, path("a")}, {1, path("b.idx")}}, 6, 300);
  ASSERT_OK(blend);
  BlendSchedule schedule({0.75, 0.25});
  std::vector<int32_t> inputs(6), labels(6);
  for (int64_t position = 0; position < 400; ++position) {
    blend->data->sampleAt(position, true, 5, inputs.data(), labels.data());
    auto [dataset, sample] = schedule.at(position);
    std::vector<int32_t> expected = naiveSample(
        dataset == 0 ? a : b, 6, sample, true, blendComponentSeed(5, dataset));
    ASSERT_EQ(inputs,
              std::vector<int32_t>(expected.begin(), expected.end() - 1))
        << "position " << position;
  }
  EXPECT_THAT(blend->summary, HasSubstr("0.75 a ("));
  EXPECT_THAT(blend->summary, HasSubstr(" + 0.25 b ("));
}

//===----------------------------------------------------------------------===//
// --data: parsing, resolution, descriptions
//===----------------------------------------------------------------------===//

TEST(DataArgumentsTest, ParsesOnePathOrWeightedPairs) {
  StatusOr<std::vector<DataSourceSpec>> one = parseDataArguments({"corpus"});
  ASSERT_OK(one);
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].path, "corpus");
  StatusOr<std::vector<DataSourceSpec>> two =
      parseDataArguments({"0.7", "a", "3e-1", "b.bin"});
  ASSERT_OK(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].weight, 0.3);
  EXPECT_EQ((*two)[1].path, "b.bin");

  EXPECT_EQ(errorOf(parseDataArguments({""})),
            "expected a value, got an empty one");
  EXPECT_EQ(errorOf(parseDataArguments({"0.7", "a", "0.3"})),
            "the weight 0.3 has no dataset after it");
  EXPECT_EQ(errorOf(parseDataArguments({"0.7", "a", "-0.3", "b"})),
            "the weight of b is -0.3, not a positive number");
  EXPECT_EQ(errorOf(parseDataArguments({"0", "a"})),
            "the weight of a is 0, not a positive number");
  EXPECT_EQ(errorOf(parseDataArguments({"nan", "a"})),
            "the weight of a is nan, not a positive number");
  EXPECT_EQ(errorOf(parseDataArguments({"0.7", "a", "b", "c"})),
            "expected a weight before each dataset (0.7 a 0.3 b), got 'b'");
  EXPECT_EQ(errorOf(parseDataArguments({"a", "b"})),
            "expected one dataset, or weights and datasets (0.7 a 0.3 b), "
            "got 'b' after a");
  EXPECT_TRUE(isDataWeight("1e-3"));
  EXPECT_FALSE(isDataWeight("1x"));
  EXPECT_FALSE(isDataWeight("corpus"));
}

TEST_F(IndexedDatasetTest, ResolvesPrefixesIndexAndBinNames) {
  writeDataset(path("corpus"), {{1, 2, 3}});
  writeBytes(path("tokens.u16"), std::string(8, '\0'));
  for (const std::string &given :
       {path("corpus"), path("corpus.idx"), path("corpus.bin")}) {
    StatusOr<ResolvedDataPath> resolved = resolveDataPath(given);
    ASSERT_OK(resolved);
    EXPECT_EQ(resolved->kind, ResolvedDataPath::Kind::Indexed);
    EXPECT_EQ(resolved->path, path("corpus"));
    EXPECT_EQ(resolved->files, (std::vector<std::string>{path("corpus.idx"),
                                                         path("corpus.bin")}));
  }
  StatusOr<ResolvedDataPath> tokens = resolveDataPath(path("tokens.u16"));
  ASSERT_OK(tokens);
  EXPECT_EQ(tokens->kind, ResolvedDataPath::Kind::TokenFile);

  EXPECT_EQ(errorOf(resolveDataPath(path("none"))),
            path("none") + ": does not exist (nor " + path("none") +
                ".idx and " + path("none") + ".bin, an indexed dataset)");
  std::filesystem::remove(path("corpus.bin"));
  EXPECT_EQ(errorOf(resolveDataPath(path("corpus"))),
            path("corpus.bin") + ": does not exist");
  writeBytes(path("notes.md"), "x");
  EXPECT_THAT(errorOf(resolveDataPath(path("notes.md"))),
              HasSubstr("notes.md: unknown data file extension '.md'"));
  EXPECT_EQ(errorOf(resolveDataPath(dir_.string())),
            dir_.string() + ": is a directory, not a file");
}

TEST_F(IndexedDatasetTest, DescriptionsTellDataApart) {
  writeDataset(path("a"), {{1, 2, 3, 4}, {5, 6}});
  writeDataset(path("b"), {{1, 2, 3}, {4, 5, 6}});
  writeDataset(path("c"), {{1, 2, 3, 4, 5}, {6}});
  auto describe = [&](std::vector<DataSourceSpec> sources) {
    StatusOr<OpenedData> opened = openTrainingData(sources, 2, 10);
    EXPECT_TRUE(opened.isOk()) << opened.status().message();
    return opened ? opened->description : std::string();
  };
  const std::string a = describe({{1, path("a")}});
  EXPECT_TRUE(checkSameData(a, describe({{1, path("a.bin")}})).isOk());
  // Moved data is the same data.
  std::filesystem::create_directory(path("moved"));
  writeDataset(path("moved/a"), {{1, 2, 3, 4}, {5, 6}});
  EXPECT_TRUE(checkSameData(a, describe({{1, path("moved/a")}})).isOk());

  EXPECT_THAT(checkSameData(a, describe({{1, path("b")}})).message(),
              HasSubstr("the same sizes, but another index"));
  writeDataset(path("d"), {{1, 2, 3, 4, 5}});
  EXPECT_EQ(checkSameData(a, describe({{1, path("d")}})).message(),
            path("d") + " holds 5 tokens in 1 documents, the checkpoint's (" +
                path("a") + ") 6 in 2 documents");
  const std::string blend = describe({{0.7, path("a")}, {0.3, path("c")}});
  EXPECT_TRUE(
      checkSameData(blend, describe({{7, path("a")}, {3, path("c")}})).isOk())
      << "weights are normalized";
  EXPECT_EQ(checkSameData(blend, describe({{0.6, path("a")}, {0.4, path("c")}}))
                .message(),
            "dataset 1 (" + path("a") +
                ") has weight 0.6 in the blend, 0.7 in the "
                "checkpoint's");
  EXPECT_EQ(checkSameData(blend, a).message(),
            "the checkpoint was trained on 2 datasets (a, c), this run reads "
            "1 (a)");
  EXPECT_FALSE(checkSameData("[]", a).isOk());
}

//===----------------------------------------------------------------------===//
// --split: each dataset's documents (a token file's samples) cut in two
//===----------------------------------------------------------------------===//

TEST(DataSplitTest, ParsesTwoPositiveWeights) {
  StatusOr<DataSplit> split = parseDataSplit("98,2");
  ASSERT_OK(split);
  EXPECT_EQ(split->train, 98.0);
  EXPECT_EQ(split->eval, 2.0);
  EXPECT_EQ(split->text, "98,2");
  for (const char *bad : {"98", "98,0", "0,2", "a,b", "98,2,1", "-1,2", "",
                          "inf,1", ","})
    EXPECT_THAT(errorOf(parseDataSplit(bad)),
                HasSubstr("expected two positive numbers TRAIN,EVAL"))
        << bad;
}

TEST(DataSplitTest, CutsAsMegatronRounds) {
  // get_train_valid_test_split_'s indices, computed by hand (Python's
  // round takes halves to even).
  struct Case {
    uint64_t count;
    double train, eval;
    uint64_t end;
  };
  for (const Case &c : std::vector<Case>{{1000, 98, 2, 980},
                                         {10, 98, 2, 10},
                                         {3, 1, 1, 1},
                                         {5, 1, 1, 3},
                                         {7, 2, 1, 5},
                                         {11096, 90, 10, 9986},
                                         {1, 1, 1, 1},
                                         {0, 1, 1, 0}})
    EXPECT_EQ(splitPoint(c.count, {c.train, c.eval, ""}), c.end)
        << c.count << " at " << c.train << "," << c.eval;
}

TEST_F(IndexedDatasetTest, SplitPartsNeverShareADocument) {
  // Document d holds tokens d + 1 alone, so a sample names its documents.
  std::mt19937_64 rng(17);
  std::vector<std::vector<int32_t>> documents(50);
  for (size_t d = 0; d < documents.size(); ++d)
    documents[d].assign(size_t(rng() % 9), int32_t(d + 1));
  writeDataset(path("corpus"), documents);
  const DataSplit split{80, 20, "80,20"};
  StatusOr<OpenedData> opened =
      openTrainingData({{1, path("corpus")}}, 4, 64, {}, split);
  ASSERT_OK(opened);
  ASSERT_TRUE(opened->heldOut);
  const int32_t cut = 40; // 80% of 50 documents
  std::vector<int32_t> inputs(4), labels(4);
  for (bool shuffle : {false, true})
    for (int64_t position = 0; position < 500; ++position) {
      opened->data->sampleAt(position, shuffle, 3, inputs.data(),
                             labels.data());
      for (int32_t token : labels)
        ASSERT_LE(token, cut) << "a training sample read a held-out document";
      opened->heldOut->sampleAt(position, shuffle, 3, inputs.data(),
                                labels.data());
      for (int32_t token : labels)
        ASSERT_GT(token, cut) << "a held-out sample read a training document";
    }
  // Each part is the dataset of its documents alone.
  std::vector<std::vector<int32_t>> trainPart(documents.begin(),
                                              documents.begin() + cut),
      heldPart(documents.begin() + cut, documents.end());
  for (int64_t position = 0; position < 100; ++position) {
    opened->data->sampleAt(position, true, 3, inputs.data(), labels.data());
    std::vector<int32_t> expected = naiveSample(trainPart, 4, position, true, 3);
    ASSERT_EQ(inputs, std::vector<int32_t>(expected.begin(), expected.end() - 1));
    opened->heldOut->sampleAt(position, false, 3, inputs.data(),
                              labels.data());
    expected = naiveSample(heldPart, 4, position, false, 3);
    ASSERT_EQ(inputs, std::vector<int32_t>(expected.begin(), expected.end() - 1));
  }
  EXPECT_THAT(opened->summary,
              HasSubstr("(--split 80,20: 40 documents train, 10 held out)"));
  EXPECT_EQ(opened->heldOutSummary, "the last 10 documents of corpus");
}

TEST_F(IndexedDatasetTest, ATokenFileSplitsBetweenItsSamples) {
  // Sample k of seq_len 3 holds tokens k (4 each).
  std::string bytes;
  for (uint16_t k = 0; k < 20; ++k)
    for (int t = 0; t < 4; ++t)
      put<uint16_t>(bytes, k);
  writeBytes(path("tokens.u16"), bytes);
  StatusOr<OpenedData> opened = openTrainingData(
      {{1, path("tokens.u16")}}, 3, 32, {}, DataSplit{3, 1, "3,1"});
  ASSERT_OK(opened);
  std::vector<int32_t> inputs(3), labels(3);
  std::set<int32_t> trained, held;
  for (int64_t position = 0; position < 200; ++position) {
    opened->data->sampleAt(position, true, 9, inputs.data(), labels.data());
    trained.insert(inputs[0]);
    opened->heldOut->sampleAt(position, true, 9, inputs.data(),
                              labels.data());
    held.insert(inputs[0]);
  }
  EXPECT_EQ(trained.size(), 15u);
  EXPECT_EQ(*trained.rbegin(), 14);
  EXPECT_EQ(held, (std::set<int32_t>{15, 16, 17, 18, 19}));
  // In file order the held-out part starts at its first sample.
  opened->heldOut->sampleAt(0, false, 9, inputs.data(), labels.data());
  EXPECT_EQ(inputs, (std::vector<int32_t>{15, 15, 15}));
  EXPECT_EQ(opened->heldOut->distinctSamples(100), 5);
  EXPECT_EQ(opened->data->distinctSamples(10), 10);
}

TEST_F(IndexedDatasetTest, SplitsAreDescribedAndRefusedWhenAPartIsEmpty) {
  writeDataset(path("a"), {{1, 2, 3}, {4, 5}, {6, 7, 8}, {9, 1}});
  auto describe = [&](std::optional<DataSplit> split) {
    StatusOr<OpenedData> opened =
        openTrainingData({{1, path("a")}}, 1, 10, {}, split);
    EXPECT_TRUE(opened.isOk()) << opened.status().message();
    return opened ? opened->description : std::string();
  };
  const std::string whole = describe(std::nullopt);
  const std::string half = describe(DataSplit{1, 1, "1,1"});
  EXPECT_TRUE(checkSameData(half, describe(DataSplit{2, 2, "2,2"})).isOk())
      << "the same cut";
  EXPECT_EQ(checkSameData(whole, half).message(),
            path("a") + " trains on its first 2 documents (--split), the "
                        "checkpoint on all of it");
  EXPECT_EQ(checkSameData(half, describe(DataSplit{3, 1, "3,1"})).message(),
            path("a") + " trains on its first 3 documents (--split), the "
                        "checkpoint on its first 2 documents (--split)");
  EXPECT_EQ(errorOf(openTrainingData({{1, path("a")}}, 1, 10, {},
                                     DataSplit{99, 1, "99,1"})),
            "--split 99,1: " + path("a") +
                " has 4 documents, which leaves none held out (each part "
                "needs one at least)");
  // A part too short for one sample.
  EXPECT_EQ(errorOf(openTrainingData({{1, path("a")}}, 4, 10, {},
                                     DataSplit{3, 1, "3,1"})),
            "--split 3,1: the part held out: " + path("a") +
                ": 2 tokens in 1 documents (documents 3 to 3 of 4), fewer "
                "than one sample of seq_len + 1 = 5");
}

TEST_F(IndexedDatasetTest, ABlendRepeatsWhereADatasetStartsOver) {
  std::string bytes;
  for (uint16_t k = 0; k < 12; ++k)
    put<uint16_t>(bytes, k);
  writeBytes(path("four.u16"), bytes);   // 4 samples of seq_len 2
  writeBytes(path("other.u16"), bytes + bytes); // 8
  StatusOr<OpenedData> blend = openTrainingData(
      {{1, path("four.u16")}, {1, path("other.u16")}}, 2, 16);
  ASSERT_OK(blend);
  // Alternating a, b, a, b...: the fifth sample of `four` is position 8.
  EXPECT_EQ(blend->data->distinctSamples(100), 8);
  EXPECT_EQ(blend->data->distinctSamples(5), 5);
}

} // namespace
