//===- DataBlend.h - --data: datasets, blends, descriptions -----*- C++ -*-===//
//
// Part of mlt. What `mlt-run --data` names, opened as one TrainingData:
//
//   --data PATH                      one dataset
//   --data W1 PATH1 W2 PATH2 ...     a weighted blend (weights, normalized
//                                    to sum 1, each before its dataset)
//
// A dataset is a token file (`.u16`, `.u32`, `.txt`: TokenData.h) or a
// Megatron indexed dataset (DocumentSampler.h), named by its prefix or by
// its `.idx` or `.bin`. A blend assigns the run's samples to its datasets
// as Megatron-Core's BlendedDataset does (helpers.cpp,
// build_blending_indices): sample i goes to the dataset d with the largest
// error weight[d] * max(i, 1) - taken[d] (the first on ties), and is that
// dataset's sample number taken[d], which then grows by one. Each dataset
// visits its own samples with its own seed (the run's seed for the first,
// splitmix64(seed ^ splitmix64(d)) for dataset d > 0), so that two datasets
// of one size do not shuffle alike. Position i's dataset and sample depend on
// i alone: a resumed run replays the assignment up to its first sample
// (linear in the samples before it: 1.9 s per 10^8 samples of a blend of
// two on the 2-core build machine) and goes on as one that never stopped.
//
// A description of the data (JSON: each dataset's path, format, weight,
// tokens, documents and a hash of its index) goes into training checkpoints,
// and resuming compares it with the data of the run (checkSameData).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_DATABLEND_H
#define MLT_RUNTIME_IO_DATABLEND_H

#include "mlt/Runtime/io/TrainingData.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlt::rt {

/// One dataset of --data: the path as given and its weight (as given; 1 for
/// a dataset alone).
struct DataSourceSpec {
  double weight = 1.0;
  std::string path;
};

/// Whether a --data value reads as a weight (a number), which decides
/// whether --data takes one path or weight-path pairs.
bool isDataWeight(const std::string &text);

/// Parses --data's values: one path, or pairs of a weight (a positive finite
/// number) and a path. Fails with one line: an empty value, a weight with no
/// dataset after it, a weight that is not positive and finite, a path where
/// a weight should be.
StatusOr<std::vector<DataSourceSpec>>
parseDataArguments(const std::vector<std::string> &values);

/// A --data path resolved to what it names.
struct ResolvedDataPath {
  enum class Kind { TokenFile, Indexed };
  Kind kind = Kind::TokenFile;
  /// The token file, or the indexed dataset's prefix.
  std::string path;
  /// The files it reads (the token file; PREFIX.idx and PREFIX.bin).
  std::vector<std::string> files;
};

/// Resolves `path`: a token file by its extension (.u16, .u32, .txt); an
/// indexed dataset by its .idx or .bin, or by a prefix whose .idx or .bin
/// exists. Every file is checked to be a regular file (a FIFO would block:
/// FileKind.h); fails with one line naming the path and the problem.
StatusOr<ResolvedDataPath> resolveDataPath(const std::string &path);

/// `weights` (positive and finite) as shares summing to 1, divided by their
/// sum as Megatron divides them; where the sum overflows (weights of 1e308),
/// by the largest first, not to infinity and shares of 0.
std::vector<double> normalizedWeights(std::vector<double> weights);

/// Megatron's BlendedDataset assignment of samples to datasets (see the file
/// comment), computed incrementally: asking for positions in increasing
/// order costs one step per position, an earlier position restarts from 0.
class BlendSchedule {
public:
  /// `weights`: positive, normalized here.
  explicit BlendSchedule(std::vector<double> weights);

  /// The dataset that sample `position` of the blend comes from, and that
  /// dataset's own sample number.
  std::pair<size_t, int64_t> at(int64_t position);

  const std::vector<double> &weights() const { return weights_; }

private:
  std::vector<double> weights_;
  int64_t next_ = 0;
  std::vector<int64_t> taken_;
};

/// The seed that dataset `index` of a blend visits its samples with.
uint64_t blendComponentSeed(uint64_t seed, size_t index);

/// A weighted blend of datasets of one sequence length.
class BlendedData : public TrainingData {
public:
  BlendedData(std::vector<std::unique_ptr<TrainingData>> datasets,
              std::vector<double> weights);

  int64_t seqLen() const override { return datasets_.front()->seqLen(); }
  void sampleAt(int64_t position, bool shuffle, uint64_t seed, int32_t *inputs,
                int32_t *labels) override;
  /// The positions before one of its datasets is asked for a sample past
  /// its own distinct ones (the schedule replayed up to `limit`).
  int64_t distinctSamples(int64_t limit) const override;
  Status checkUnchanged() const override {
    for (const std::unique_ptr<TrainingData> &dataset : datasets_)
      MLT_RETURN_IF_ERROR(dataset->checkUnchanged());
    return Status::ok();
  }

private:
  std::vector<std::unique_ptr<TrainingData>> datasets_;
  BlendSchedule schedule_;
};

/// Progress of the token check of one file: bytes done and in all.
using DataOpenProgress =
    std::function<void(const std::string &file, uint64_t done, uint64_t total)>;

/// --split TRAIN,EVAL: each dataset of --data cut in two, as Megatron's
/// --split cuts it (its train and validation parts): the first documents
/// train, the last are held out for evaluation, in the proportion of the
/// two weights (normalized). An indexed dataset is cut between documents;
/// a token file, which has none, between its samples (windows of seq_len +
/// 1 tokens that no two samples share). The training data then never reads
/// a held-out token.
struct DataSplit {
  double train = 0.0;
  double eval = 0.0;
  /// "98,2", as given.
  std::string text;
};

/// Parses --split's value: two positive finite numbers, "TRAIN,EVAL".
/// Fails with one line.
StatusOr<DataSplit> parseDataSplit(const std::string &text);

/// Where `split` cuts `count` units (documents, or a token file's
/// samples): units [0, end) train, [end, count) are held out. Megatron's
/// rounding (get_train_valid_test_split_): each part's size is its share of
/// `count` rounded (half to even, as Python's round), the parts' ends
/// moved together so that the last is `count`.
uint64_t splitPoint(uint64_t count, const DataSplit &split);

/// The data of a run, opened.
struct OpenedData {
  std::unique_ptr<TrainingData> data;
  /// The description that checkpoints record (see the file comment; with
  /// a split, each dataset's part that trains).
  std::string description;
  /// One line for the run's banner: "corpus (12345 tokens, 67 documents)",
  /// "0.7 a + 0.3 b", or a token file's name.
  std::string summary;
  /// With a split: the held-out parts of the datasets (blended with the
  /// same weights), and their summary.
  std::unique_ptr<TrainingData> heldOut;
  std::string heldOutSummary;
  /// Each dataset as its path resolved (an indexed dataset's prefix, which
  /// ExportFiles.h finds the record of its tokenizer beside).
  std::vector<ResolvedDataPath> sources;
};

/// Opens `sources` (parseDataArguments) for samples of `seqLen` + 1 token
/// ids below `vocab`: each dataset resolved, opened and checked whole (the
/// first error, naming its file, is returned); with `split`, each cut in
/// two (DataSplit), both parts holding a sample at least.
StatusOr<OpenedData>
openTrainingData(const std::vector<DataSourceSpec> &sources, int64_t seqLen,
                 int64_t vocab, const DataOpenProgress &progress = {},
                 const std::optional<DataSplit> &split = std::nullopt);

/// Ok when the data `current` describes is the data `saved` describes (the
/// same number of datasets, each of the same format, tokens, documents and
/// index, with the same weights; paths may differ: data may move); else one
/// line saying what differs.
Status checkSameData(const std::string &saved, const std::string &current);

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_DATABLEND_H
