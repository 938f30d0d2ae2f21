//===- HFModelDirectory.h - what an HF model directory holds ----*- C++ -*-===//
//
// Part of mlt. A Hugging Face model directory (what `save_pretrained`
// writes and the Hub serves) holds config.json, the weights, the files of
// its tokenizer and its generation settings. Every tool that takes a model
// takes such a directory where it takes a config.json, by the one rule
// here (mlt-run through PlanSource and the compiler's driver, mlt-translate
// --import-hf-llama, the importer's readHFLlamaConfig); and the files an HF
// export copies beside the weights are named here (ExportFiles.h).
// Header-only, plain POSIX: the runtime-only build uses it too.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_HFMODELDIRECTORY_H
#define MLT_SUPPORT_HFMODELDIRECTORY_H

#include "mlt/Support/Status.h"

#include <optional>
#include <string>
#include <sys/stat.h>

namespace mlt {

/// The model's configuration in an HF model directory.
inline constexpr const char *kHFConfigFile = "config.json";
/// Its generation settings (bos/eos ids, sampling defaults).
inline constexpr const char *kHFGenerationConfigFile = "generation_config.json";
/// Its tokenizer's files, as AutoTokenizer looks for them: the tokenizer
/// (tokenizers' tokenizer.json, SentencePiece's tokenizer.model) and the
/// files that configure it.
inline constexpr const char *kHFTokenizerFiles[] = {
    "tokenizer.json", "tokenizer.model", "tokenizer_config.json",
    "special_tokens_map.json"};

/// The config.json that `path` names: `path` itself, or, for a directory,
/// the config.json in it. A directory without one is refused ("DIR: a
/// directory without config.json"); anything else is for the reader to
/// check.
inline StatusOr<std::string> hfConfigPath(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return path;
  const std::string config =
      path + (path.empty() || path.back() == '/' ? "" : "/") + kHFConfigFile;
  if (::stat(config.c_str(), &st) != 0)
    return errorf(path, ": a directory without ", kHFConfigFile,
                  " (an HF model directory holds one)");
  return config;
}

/// The HF model directory that `path` names: the directory itself, or the
/// directory of a file named config.json; none for any other path (a
/// `.mlir` model, a config of another name, which may lie in a directory of
/// other models).
inline std::optional<std::string> hfModelDirectory(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::nullopt;
  if (S_ISDIR(st.st_mode))
    return path;
  const size_t slash = path.find_last_of('/');
  const std::string name =
      slash == std::string::npos ? path : path.substr(slash + 1);
  if (name != kHFConfigFile)
    return std::nullopt;
  return slash == std::string::npos ? std::string(".")
         : slash == 0               ? std::string("/")
                                    : path.substr(0, slash);
}

} // namespace mlt

#endif // MLT_SUPPORT_HFMODELDIRECTORY_H
