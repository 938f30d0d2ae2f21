//===- RankList.h - sets of ranks in messages --------------------*- C++ -*-===//
//
// Part of mlt. One way to write a set of ranks for a person, as the hang
// report's summary names who waits where: "0-4,6,7" (ranks in increasing
// order, each run of three or more consecutive ranks as FIRST-LAST, shorter
// runs rank by rank, duplicates once). Header-only.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_RANKLIST_H
#define MLT_SUPPORT_RANKLIST_H

#include <algorithm>
#include <string>
#include <vector>

namespace mlt {

/// `ranks` as "0-4,6,7"; "" for none.
inline std::string formatRankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string text;
  for (size_t begin = 0; begin < ranks.size();) {
    size_t end = begin + 1;
    while (end < ranks.size() && ranks[end] == ranks[end - 1] + 1)
      ++end;
    auto add = [&](const std::string &part) {
      if (!text.empty())
        text += ',';
      text += part;
    };
    if (end - begin >= 3) {
      add(std::to_string(ranks[begin]) + "-" + std::to_string(ranks[end - 1]));
    } else {
      for (size_t k = begin; k < end; ++k)
        add(std::to_string(ranks[k]));
    }
    begin = end;
  }
  return text;
}

} // namespace mlt

#endif // MLT_SUPPORT_RANKLIST_H
