//===- QuantizationReuse.cpp - one FP8 quantization for many products -----===//
//
// Part of mlt. shareQuantizations keeps, per (source, form), the request
// whose copy is current; a write of the source forgets the source's copies,
// a barrier all of them. checkSharing recomputes each origin by looking back
// from the request.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/QuantizationReuse.h"

#include <algorithm>
#include <map>
#include <sstream>

using namespace mlt::analysis;

std::vector<std::vector<RequestRef>>
mlt::analysis::shareQuantizations(const std::vector<QuantizeItem> &items) {
  std::map<std::pair<int64_t, uint64_t>, RequestRef> current;
  std::vector<std::vector<RequestRef>> origins(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const QuantizeItem &item = items[i];
    if (item.barrier)
      current.clear();
    for (size_t r = 0; r < item.requests.size(); ++r) {
      const QuantizeRequest &request = item.requests[r];
      auto [it, made] =
          current.try_emplace({request.source, request.form}, RequestRef{i, r});
      origins[i].push_back(it->second);
      (void)made;
    }
    // After the launch: its writes make the copies of what it wrote stale.
    for (int64_t written : item.writes)
      for (auto it = current.lower_bound({written, 0});
           it != current.end() && it->first.first == written;)
        it = current.erase(it);
    if (item.barrier)
      current.clear();
  }
  return origins;
}

std::string mlt::analysis::checkSharing(
    const std::vector<QuantizeItem> &items,
    const std::vector<std::vector<RequestRef>> &origins) {
  std::ostringstream error;
  if (origins.size() != items.size())
    return "one list of origins per item expected";
  // The naive origin of (i, r): look back for the latest earlier request of
  // the same (source, form) with nothing in between that writes the source
  // or is a barrier; the origin is that request's.
  for (size_t i = 0; i < items.size(); ++i) {
    if (origins[i].size() != items[i].requests.size())
      return "item " + std::to_string(i) + ": one origin per request expected";
    for (size_t r = 0; r < items[i].requests.size(); ++r) {
      const QuantizeRequest &request = items[i].requests[r];
      RequestRef expected{i, r};
      bool found = false;
      // Earlier requests of the same launch first.
      for (size_t q = r; q-- > 0;)
        if (items[i].requests[q].source == request.source &&
            items[i].requests[q].form == request.form) {
          expected = origins[i][q];
          found = true;
          break;
        }
      for (size_t j = i; !found && j-- > 0 && !items[j + 1].barrier;) {
        const QuantizeItem &before = items[j];
        if (before.barrier || std::count(before.writes.begin(),
                                         before.writes.end(), request.source))
          break;
        for (size_t q = before.requests.size(); q-- > 0;)
          if (before.requests[q].source == request.source &&
              before.requests[q].form == request.form) {
            expected = origins[j][q];
            found = true;
            break;
          }
      }
      if (origins[i][r] != expected) {
        error << "item " << i << " request " << r << " (source "
              << request.source << ", form " << request.form
              << ") reads the copy of (" << origins[i][r].first << ", "
              << origins[i][r].second << "), expected (" << expected.first
              << ", " << expected.second << ")";
        return error.str();
      }
    }
  }
  return "";
}
