//===- StagePartition.cpp - a model's layers split into pipeline stages ---===//
//
// Part of mlt. The balanced split (a dynamic program over prefixes), its
// naive reference, and the check of a split set by hand (StagePartition.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StagePartition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

using namespace mlt;

double StageSplit::slowest() const {
  return times.empty() ? 0.0 : *std::max_element(times.begin(), times.end());
}

std::vector<double> mlt::stageTimes(const StageCosts &costs,
                                    const std::vector<int64_t> &layers) {
  std::vector<double> times;
  size_t next = 0;
  for (size_t v = 0; v < layers.size(); ++v) {
    double time = v == 0 ? costs.first : 0.0;
    if (v + 1 == layers.size())
      time += costs.last;
    for (int64_t i = 0; i < layers[v] && next < costs.layers.size(); ++i)
      time += costs.layers[next++];
    times.push_back(time);
  }
  return times;
}

bool mlt::checkStageLayers(const std::vector<int64_t> &layers,
                           int64_t numLayers, int64_t stages, int64_t chunks,
                           std::string *why) {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  std::string list;
  for (int64_t count : layers)
    list += (list.empty() ? "" : ",") + std::to_string(count);
  const int64_t expected = stages * chunks;
  if (int64_t(layers.size()) != expected)
    return fail("--pp-layers " + list + " gives " +
                std::to_string(layers.size()) + " stages, the layout has " +
                std::to_string(expected) +
                (chunks > 1 ? " (pp " + std::to_string(stages) + " x vp " +
                                  std::to_string(chunks) + ")"
                            : ""));
  for (int64_t count : layers)
    if (count < 1)
      return fail("--pp-layers " + list +
                  ": every stage needs at least one layer");
  const int64_t placed = std::accumulate(layers.begin(), layers.end(),
                                         int64_t(0));
  if (placed != numLayers)
    return fail("--pp-layers " + list + " places " + std::to_string(placed) +
                " layers, the model has " + std::to_string(numLayers));
  return true;
}

StageSplit mlt::balanceStages(const StageCosts &costs, int64_t stages,
                              int64_t chunks, std::string *why) {
  const int64_t n = int64_t(costs.layers.size());
  const int64_t k = stages * chunks;
  if (stages < 1 || chunks < 1 || n < k) {
    if (why)
      *why = "the model's " + std::to_string(n) + " layers cannot fill " +
             std::to_string(k) + " pipeline stages" +
             (chunks > 1 ? " (pp " + std::to_string(stages) + " x vp " +
                               std::to_string(chunks) + ")"
                         : "") +
             ": each needs at least one layer";
    return {};
  }
  std::vector<double> prefix(size_t(n) + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[size_t(i) + 1] = prefix[size_t(i)] + costs.layers[size_t(i)];
  // The time of virtual stage v holding layers [a, b).
  auto time = [&](int64_t v, int64_t a, int64_t b) {
    return prefix[size_t(b)] - prefix[size_t(a)] + (v == 0 ? costs.first : 0) +
           (v + 1 == k ? costs.last : 0);
  };
  // best[v][i]: the least slowest stage of splitting the last n - i layers
  // into virtual stages v..k-1 (suffixes, so that each stage's choice can
  // prefer fewer layers on a tie).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(
      size_t(k) + 1, std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int64_t>> cut(
      size_t(k), std::vector<int64_t>(size_t(n) + 1, -1));
  best[size_t(k)][size_t(n)] = 0.0;
  for (int64_t v = k - 1; v >= 0; --v)
    for (int64_t i = v; i + (k - v) <= n; ++i) {
      // Stage v takes [i, j); the rest need at least one layer each. The
      // smallest j among equals: later stages hold more.
      for (int64_t j = i + 1; j + (k - v - 1) <= n; ++j) {
        const double value =
            std::max(time(v, i, j), best[size_t(v) + 1][size_t(j)]);
        if (value < best[size_t(v)][size_t(i)]) {
          best[size_t(v)][size_t(i)] = value;
          cut[size_t(v)][size_t(i)] = j;
        }
      }
    }
  StageSplit split;
  for (int64_t v = 0, i = 0; v < k; ++v) {
    const int64_t j = cut[size_t(v)][size_t(i)];
    split.layers.push_back(j - i);
    i = j;
  }
  split.times = stageTimes(costs, split.layers);
  return split;
}

StageSplit mlt::balanceStagesNaive(const StageCosts &costs, int64_t stages,
                                   int64_t chunks) {
  const int64_t n = int64_t(costs.layers.size());
  const int64_t k = stages * chunks;
  StageSplit best;
  std::vector<int64_t> layers;
  std::function<void(int64_t)> place = [&](int64_t left) {
    const int64_t v = int64_t(layers.size());
    if (v == k) {
      if (left != 0)
        return;
      std::vector<double> times = stageTimes(costs, layers);
      const double slowest = *std::max_element(times.begin(), times.end());
      if (best.layers.empty() || slowest < best.slowest())
        best = StageSplit{layers, times};
      return;
    }
    for (int64_t count = 1; count <= left - (k - v - 1); ++count) {
      layers.push_back(count);
      place(left - count);
      layers.pop_back();
    }
  };
  if (k >= 1 && n >= k)
    place(n);
  return best;
}
