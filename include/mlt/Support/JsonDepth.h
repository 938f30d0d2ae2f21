//===- JsonDepth.h - how deep a JSON text nests, before parsing -*- C++ -*-===//
//
// Part of mlt. The JSON parsers mlt uses (LLVM's for HF configs, nlohmann's
// for safetensors headers, checkpoint indexes and plans' configs) recurse
// once per level of nesting, so a text nested 40,000 deep overflows the
// stack. Every JSON mlt reads from a file is first measured here, in one
// pass that knows strings and escapes, and refused past a depth no real
// config, header or index comes near. Header-only, plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_JSONDEPTH_H
#define MLT_SUPPORT_JSONDEPTH_H

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace mlt {

/// The deepest nesting mlt accepts in a JSON text (an HF config nests 3 or
/// 4 levels, a safetensors header or checkpoint index 3).
inline constexpr size_t kMaxJsonDepth = 128;

/// Where `text` first nests deeper than `limit` arrays and objects (the
/// offset of the bracket that does), or nullopt. Brackets inside strings
/// do not count; the text need not be valid JSON (the parser says so).
inline std::optional<size_t> jsonTooDeepAt(std::string_view text,
                                           size_t limit = kMaxJsonDepth) {
  size_t depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit)
        return i;
    } else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return std::nullopt;
}

/// "nests deeper than 128 levels (at byte 129)", for messages.
inline std::string jsonTooDeepMessage(size_t at,
                                      size_t limit = kMaxJsonDepth) {
  return "nests deeper than " + std::to_string(limit) + " levels (at byte " +
         std::to_string(at) + ")";
}

} // namespace mlt

#endif // MLT_SUPPORT_JSONDEPTH_H
