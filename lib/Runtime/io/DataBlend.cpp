//===- DataBlend.cpp - --data: datasets, blends, descriptions -------------===//
//
// Part of mlt. Implements the parsing of --data's values, the resolution of
// a path to a token file or an indexed dataset, Megatron's blend
// assignment, the opening of a run's data and the comparison of data
// descriptions (DataBlend.h has the rules).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Runtime/Random.h"
#include "mlt/Runtime/io/DocumentSampler.h"
#include "mlt/Runtime/io/IndexedDataset.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Support/FileKind.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>

#include <sys/stat.h>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;

namespace {

bool endsWith(const std::string &s, const char *suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// Whether something (a file, a FIFO, a dangling link) is at `path`.
bool somethingAt(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string baseName(const std::string &path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  const size_t slash = trimmed.find_last_of('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

std::string absolutePath(const std::string &path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  return error ? path : absolute.lexically_normal().string();
}

/// "0.7": a weight as messages and banners print it.
std::string formatWeight(double weight) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", weight);
  return text;
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", (unsigned long long)value);
  return text;
}

} // namespace

bool mlt::rt::isDataWeight(const std::string &text) {
  if (text.empty())
    return false;
  char *end = nullptr;
  (void)std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

StatusOr<std::vector<DataSourceSpec>>
mlt::rt::parseDataArguments(const std::vector<std::string> &values) {
  if (values.empty() || values.front().empty())
    return errorf("expected a value, got an empty one");
  if (!isDataWeight(values.front())) {
    if (values.size() != 1)
      return errorf("expected one dataset, or weights and datasets "
                    "(0.7 a 0.3 b), got '",
                    values[1], "' after ", values[0]);
    return std::vector<DataSourceSpec>{{1.0, values.front()}};
  }
  std::vector<DataSourceSpec> sources;
  for (size_t i = 0; i < values.size(); i += 2) {
    const std::string &weightText = values[i];
    if (!isDataWeight(weightText))
      return errorf("expected a weight before each dataset (0.7 a 0.3 b), "
                    "got '",
                    weightText, "'");
    if (i + 1 >= values.size())
      return errorf("the weight ", weightText, " has no dataset after it");
    const std::string &path = values[i + 1];
    if (path.empty())
      return errorf("the weight ", weightText, " is followed by an empty path");
    const double weight = std::strtod(weightText.c_str(), nullptr);
    if (!std::isfinite(weight) || weight <= 0)
      return errorf("the weight of ", path, " is ", weightText,
                    ", not a positive number");
    sources.push_back({weight, path});
  }
  return sources;
}

StatusOr<ResolvedDataPath> mlt::rt::resolveDataPath(const std::string &path) {
  if (path.empty())
    return errorf("expected a value, got an empty one");
  ResolvedDataPath resolved;
  if (endsWith(path, ".u16") || endsWith(path, ".u32") ||
      endsWith(path, ".txt")) {
    MLT_RETURN_IF_ERROR(checkInputPath(path));
    resolved.path = path;
    resolved.files = {path};
    return resolved;
  }
  std::string prefix;
  if (endsWith(path, ".idx") || endsWith(path, ".bin"))
    prefix = path.substr(0, path.size() - 4);
  else if (somethingAt(path + ".idx") || somethingAt(path + ".bin"))
    prefix = path;
  if (prefix.empty()) {
    // Neither: say what is there, if anything.
    if (!somethingAt(path))
      return errorf(path, ": does not exist (nor ", path, ".idx and ", path,
                    ".bin, an indexed dataset)");
    MLT_RETURN_IF_ERROR(checkInputPath(path));
    const std::string name = baseName(path);
    const size_t dot = name.find_last_of('.');
    return errorf(path, ": unknown data file extension '",
                  dot == std::string::npos ? std::string("(none)")
                                           : name.substr(dot),
                  "' (expected .u16, .u32 or .txt token files, or an indexed "
                  "dataset's .idx, .bin or prefix)");
  }
  resolved.kind = ResolvedDataPath::Kind::Indexed;
  resolved.path = prefix;
  resolved.files = {prefix + ".idx", prefix + ".bin"};
  for (const std::string &file : resolved.files)
    MLT_RETURN_IF_ERROR(checkInputPath(file));
  return resolved;
}

std::vector<double> mlt::rt::normalizedWeights(std::vector<double> weights) {
  assert(!weights.empty() && "a blend of nothing");
  // Divided by their sum as Megatron divides them (so that shares, and the
  // samples' assignment, are its own to the bit); by the largest first
  // where that sum overflows.
  auto sumOf = [&] {
    double sum = 0;
    for (double w : weights)
      sum += w;
    return sum;
  };
  double sum = sumOf();
  if (!std::isfinite(sum)) {
    const double largest = *std::max_element(weights.begin(), weights.end());
    for (double &w : weights)
      w /= largest;
    sum = sumOf();
  }
  for (double &w : weights)
    w /= sum;
  return weights;
}

BlendSchedule::BlendSchedule(std::vector<double> weights)
    : weights_(normalizedWeights(std::move(weights))),
      taken_(weights_.size(), 0) {}

std::pair<size_t, int64_t> BlendSchedule::at(int64_t position) {
  assert(position >= 0 && "negative position");
  if (position < next_) {
    next_ = 0;
    std::fill(taken_.begin(), taken_.end(), 0);
  }
  while (true) {
    // Megatron's error: weight * max(i, 1) - taken, the first largest.
    const double scale = std::max(double(next_), 1.0);
    size_t best = 0;
    double bestError = weights_[0] * scale - double(taken_[0]);
    for (size_t d = 1; d < weights_.size(); ++d) {
      const double error = weights_[d] * scale - double(taken_[d]);
      if (error > bestError) {
        bestError = error;
        best = d;
      }
    }
    const int64_t sample = taken_[best]++;
    if (next_++ == position)
      return {best, sample};
  }
}

uint64_t mlt::rt::blendComponentSeed(uint64_t seed, size_t index) {
  return index == 0 ? seed : splitmix64(seed ^ splitmix64(uint64_t(index)));
}

BlendedData::BlendedData(std::vector<std::unique_ptr<TrainingData>> datasets,
                         std::vector<double> weights)
    : datasets_(std::move(datasets)), schedule_(std::move(weights)) {
  assert(datasets_.size() == schedule_.weights().size() &&
         "one weight per dataset");
}

void BlendedData::sampleAt(int64_t position, bool shuffle, uint64_t seed,
                           int32_t *inputs, int32_t *labels) {
  auto [dataset, sample] = schedule_.at(position);
  datasets_[dataset]->sampleAt(
      sample, shuffle, blendComponentSeed(seed, dataset), inputs, labels);
}

int64_t BlendedData::distinctSamples(int64_t limit) const {
  BlendSchedule schedule(schedule_.weights());
  for (int64_t position = 0; position < limit; ++position) {
    auto [dataset, sample] = schedule.at(position);
    if (datasets_[dataset]->distinctSamples(sample + 1) <= sample)
      return position;
  }
  return limit;
}

StatusOr<DataSplit> mlt::rt::parseDataSplit(const std::string &text) {
  const size_t comma = text.find(',');
  auto weight = [](const std::string &part, double &out) {
    char *end = nullptr;
    out = std::strtod(part.c_str(), &end);
    return !part.empty() && end == part.c_str() + part.size() &&
           std::isfinite(out) && out > 0;
  };
  DataSplit split;
  split.text = text;
  if (comma == std::string::npos ||
      !weight(text.substr(0, comma), split.train) ||
      !weight(text.substr(comma + 1), split.eval))
    return errorf("expected two positive numbers TRAIN,EVAL (98,2: 98% of "
                  "each dataset's documents train, 2% are held out for "
                  "evaluation), got '",
                  text, "'");
  return split;
}

uint64_t mlt::rt::splitPoint(uint64_t count, const DataSplit &split) {
  // Megatron's get_train_valid_test_split_ with two parts: Python's
  // round, half to even (nearbyint in the default rounding mode).
  const double total = split.train + split.eval;
  const double n = double(count);
  const int64_t trainEnd = int64_t(std::nearbyint(split.train / total * n));
  const int64_t evalEnd =
      trainEnd + int64_t(std::nearbyint(split.eval / total * n));
  const int64_t moved = trainEnd - (evalEnd - int64_t(count));
  return uint64_t(std::clamp<int64_t>(moved, 0, int64_t(count)));
}

namespace {

/// With --split, where a dataset of `count` units (`unit`: "documents" or
/// "samples") is cut; fails when a part would be empty.
StatusOr<uint64_t> cutOf(const std::string &path, uint64_t count,
                         const char *unit, const DataSplit &split) {
  const uint64_t end = splitPoint(count, split);
  if (end == 0 || end == count)
    return errorf("--split ", split.text, ": ", path, " has ", count, " ",
                  unit, ", which leaves ", end == 0 ? "none to train on"
                                                    : "none held out",
                  " (each part needs one at least)");
  return end;
}

} // namespace

StatusOr<OpenedData>
mlt::rt::openTrainingData(const std::vector<DataSourceSpec> &sources,
                          int64_t seqLen, int64_t vocab,
                          const DataOpenProgress &progress,
                          const std::optional<DataSplit> &split) {
  if (sources.empty())
    return errorf("no datasets");
  std::vector<double> shares;
  for (const DataSourceSpec &source : sources)
    shares.push_back(source.weight);
  shares = normalizedWeights(std::move(shares));

  std::vector<std::unique_ptr<TrainingData>> datasets, heldOut;
  std::vector<double> weights;
  std::vector<ResolvedDataPath> resolvedSources;
  json described = json::array();
  std::string summary, heldOutSummary;
  for (size_t i = 0; i < sources.size(); ++i) {
    const DataSourceSpec &source = sources[i];
    const double weight = shares[i];
    StatusOr<ResolvedDataPath> resolved = resolveDataPath(source.path);
    if (!resolved)
      return resolved.takeStatus();
    json entry = {{"path", absolutePath(resolved->path)}, {"weight", weight}};
    std::string name;
    if (resolved->kind == ResolvedDataPath::Kind::TokenFile) {
      StatusOr<TokenDataset> tokens =
          TokenDataset::open(resolved->path, seqLen, vocab);
      if (!tokens)
        return tokens.takeStatus();
      const std::string extension =
          resolved->path.substr(resolved->path.size() - 3);
      entry["format"] = extension;
      entry["tokens"] = tokens->numTokens();
      name = baseName(resolved->path);
      if (!split) {
        datasets.push_back(std::make_unique<TokenDataset>(std::move(*tokens)));
      } else {
        const int64_t samples = tokens->numSamples();
        StatusOr<uint64_t> cut =
            cutOf(resolved->path, uint64_t(samples), "samples", *split);
        if (!cut)
          return cut.takeStatus();
        auto shared = std::make_shared<TokenDataset>(std::move(*tokens));
        datasets.push_back(
            std::make_unique<TokenSampleRange>(shared, 0, int64_t(*cut)));
        heldOut.push_back(std::make_unique<TokenSampleRange>(
            shared, int64_t(*cut), samples - int64_t(*cut)));
        entry["split"] = {{"unit", "samples"},
                          {"train", *cut},
                          {"held_out", uint64_t(samples) - *cut}};
      }
    } else {
      const std::string binPath = resolved->path + ".bin";
      ScanProgress scan;
      if (progress)
        scan = [&](uint64_t done, uint64_t total) {
          progress(binPath, done, total);
        };
      StatusOr<IndexedDataset> indexed =
          IndexedDataset::open(resolved->path, vocab, scan);
      if (!indexed)
        return indexed.takeStatus();
      entry["format"] = "indexed";
      entry["dtype"] = indexDTypeName(indexed->layout().dtypeCode);
      entry["tokens"] = indexed->numTokens();
      entry["documents"] = indexed->numDocuments();
      entry["index_hash"] = hex64(indexed->indexHash());
      name = baseName(resolved->path) + " (" +
             std::to_string(indexed->numTokens()) + " tokens, " +
             std::to_string(indexed->numDocuments()) + " documents)";
      const uint64_t documents = indexed->numDocuments();
      uint64_t cut = documents;
      if (split) {
        StatusOr<uint64_t> at =
            cutOf(resolved->path, documents, "documents", *split);
        if (!at)
          return at.takeStatus();
        cut = *at;
        entry["split"] = {{"unit", "documents"},
                          {"train", cut},
                          {"held_out", documents - cut}};
      }
      auto shared = std::make_shared<const IndexedDataset>(std::move(*indexed));
      StatusOr<std::unique_ptr<IndexedData>> samples =
          IndexedData::create(shared, seqLen, {0, cut});
      if (!samples && split)
        return samples.takeStatus().withContext("--split " + split->text +
                                                ": the part that trains");
      if (!samples)
        return samples.takeStatus();
      datasets.push_back(std::move(*samples));
      if (split) {
        StatusOr<std::unique_ptr<IndexedData>> held =
            IndexedData::create(shared, seqLen, {cut, documents});
        if (!held)
          return held.takeStatus().withContext("--split " + split->text +
                                               ": the part held out");
        heldOut.push_back(std::move(*held));
      }
    }
    if (split) {
      const json &cut = entry["split"];
      name += " (--split " + split->text + ": " +
              std::to_string(cut["train"].get<uint64_t>()) + " " +
              cut["unit"].get<std::string>() + " train, " +
              std::to_string(cut["held_out"].get<uint64_t>()) +
              " held out)";
      heldOutSummary += (heldOutSummary.empty() ? "" : " + ") +
                        (sources.size() > 1 ? formatWeight(weight) + " " : "") +
                        "the last " +
                        std::to_string(cut["held_out"].get<uint64_t>()) + " " +
                        cut["unit"].get<std::string>() + " of " +
                        baseName(resolved->path);
    }
    described.push_back(std::move(entry));
    resolvedSources.push_back(std::move(*resolved));
    weights.push_back(weight);
    summary += (summary.empty() ? "" : " + ") +
               (sources.size() > 1 ? formatWeight(weight) + " " : "") + name;
  }
  OpenedData opened;
  opened.description = json{{"datasets", described}}.dump();
  opened.summary = summary;
  opened.heldOutSummary = heldOutSummary;
  opened.sources = std::move(resolvedSources);
  auto blend = [&](std::vector<std::unique_ptr<TrainingData>> parts)
      -> std::unique_ptr<TrainingData> {
    if (parts.size() == 1)
      return std::move(parts.front());
    return std::make_unique<BlendedData>(std::move(parts), weights);
  };
  opened.data = blend(std::move(datasets));
  if (split)
    opened.heldOut = blend(std::move(heldOut));
  return opened;
}

Status mlt::rt::checkSameData(const std::string &saved,
                              const std::string &current) {
  const json was = json::parse(saved, nullptr, false);
  const json now = json::parse(current, nullptr, false);
  auto datasetsOf = [](const json &description) -> const json * {
    if (!description.is_object())
      return nullptr;
    auto it = description.find("datasets");
    return it != description.end() && it->is_array() ? &*it : nullptr;
  };
  const json *before = datasetsOf(was), *after = datasetsOf(now);
  if (!before)
    return errorf("the checkpoint's description of its data is not one "
                  "mlt reads");
  assert(after && "this run's data description is malformed");
  auto names = [](const json &datasets) {
    std::string text;
    for (const json &entry : datasets)
      text += (text.empty() ? "" : ", ") +
              baseName(entry.value("path", std::string("?")));
    return text;
  };
  if (before->size() != after->size())
    return errorf("the checkpoint was trained on ", before->size(), " dataset",
                  before->size() == 1 ? "" : "s", " (", names(*before),
                  "), this run reads ", after->size(), " (", names(*after),
                  ")");
  for (size_t i = 0; i < before->size(); ++i) {
    const json &a = (*before)[i], &b = (*after)[i];
    const std::string pathA = a.value("path", std::string("?")),
                      pathB = b.value("path", std::string("?"));
    const std::string which =
        before->size() == 1
            ? pathB
            : "dataset " + std::to_string(i + 1) + " (" + pathB + ")";
    auto field = [](const json &entry, const char *key) {
      auto it = entry.find(key);
      return it == entry.end() ? std::string("none") : it->dump();
    };
    if (field(a, "format") != field(b, "format"))
      return errorf(which, " is a ", field(b, "format"),
                    " dataset, the checkpoint's (", pathA, ") ",
                    field(a, "format"));
    if (field(a, "tokens") != field(b, "tokens") ||
        field(a, "documents") != field(b, "documents"))
      return errorf(which, " holds ", field(b, "tokens"), " tokens",
                    b.contains("documents")
                        ? " in " + field(b, "documents") + " documents"
                        : std::string(),
                    ", the checkpoint's (", pathA, ") ", field(a, "tokens"),
                    a.contains("documents")
                        ? " in " + field(a, "documents") + " documents"
                        : std::string());
    if (field(a, "index_hash") != field(b, "index_hash") ||
        field(a, "dtype") != field(b, "dtype"))
      return errorf(which, " is not the checkpoint's (", pathA,
                    "): the same sizes, but another index (another "
                    "tokenization?)");
    // --split: the part that trains.
    auto part = [](const json &entry) -> std::string {
      auto it = entry.find("split");
      if (it == entry.end() || !it->is_object())
        return "all of it";
      return "its first " + it->value("train", json()).dump() + " " +
             it->value("unit", std::string("?")) + " (--split)";
    };
    if (part(a) != part(b))
      return errorf(which, " trains on ", part(b), ", the checkpoint on ",
                    part(a));
    const double wa = a.value("weight", 0.0), wb = b.value("weight", 0.0);
    if (std::fabs(wa - wb) > 1e-12 * std::max(std::fabs(wa), 1.0))
      return errorf(which, " has weight ", formatWeight(wb), " in the blend, ",
                    formatWeight(wa),
                    " in the "
                    "checkpoint's");
  }
  return Status::ok();
}
