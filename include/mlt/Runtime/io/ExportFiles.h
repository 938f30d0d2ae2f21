//===- ExportFiles.h - what HF exports copy beside the weights --*- C++ -*-===//
//
// Part of mlt. An HF export (mlt-run --save-hf, mlt-checkpoint to-hf) is a
// model directory that transformers loads whole: config.json and
// model.safetensors, which the run writes; the tokenizer's files, for
// AutoTokenizer; and generation_config.json, the bos/eos ids generate()
// starts and stops with. The tokenizer's files are copied from where the
// run found them, which an ExportRecord names:
//
//   - the tokenizer that made the data: mlt-tokenize records it beside each
//     dataset it writes (PREFIX.meta.json: each file's absolute path, size
//     and XXH3-64 hash); the datasets of a blend must agree;
//   - else the tokenizer of the HF model directory mlt-run trains
//     (HFModelDirectory.h's names), hashed when the run starts.
//
// The data's comes first: its ids are what the model learned. The model
// directory's generation_config.json is recorded too; without one, the
// export writes a generation_config.json of config.json's special-token
// ids. mlt-run keeps the record in its training checkpoints (trainer.json's
// "export_files"), so that to-hf copies the same files.
//
// A file is copied only while its bytes have the recorded size and hash,
// read once and written as read: a tokenizer changed or gone since it was
// recorded is left out with a warning (one line), never replaced silently
// by what is there now. The tokenizer's files go together or not at all (a
// tokenizer.json without the tokenizer_config.json it was recorded with
// would load as another tokenizer).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_EXPORTFILES_H
#define MLT_RUNTIME_IO_EXPORTFILES_H

#include "mlt/Support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlt::rt {

/// One file an export copies: its name in the export (one of
/// HFModelDirectory.h's), where it was found (an absolute path), its size
/// and its XXH3-64 hash (16 hex digits, xxhsum -H3's form).
struct RecordedFile {
  std::string name;
  std::string path;
  uint64_t bytes = 0;
  std::string xxh3;
};

/// The files an export copies, and where they were found.
struct ExportRecord {
  /// The tokenizer's files (empty: none known), and where the record came
  /// from, for messages ("corpus.meta.json", "the model directory m").
  std::vector<RecordedFile> tokenizer;
  std::string tokenizerOrigin;
  /// The model directory's generation_config.json, where it had one.
  std::optional<RecordedFile> generationConfig;

  bool empty() const { return tokenizer.empty() && !generationConfig; }
  /// As JSON text (trainer.json's "export_files"); and read back, checked
  /// as readDatasetTokenizer checks a dataset's record.
  std::string toJson() const;
  static StatusOr<ExportRecord> fromJson(const std::string &text);
};

/// The tokenizer mlt-tokenize recorded beside the indexed dataset `prefix`
/// (PREFIX.meta.json): none without the file (a dataset made otherwise);
/// an error naming the file when it is not a record mlt-tokenize writes
/// (each file's name one a tokenizer has, its path absolute, its hash 16
/// hex digits).
StatusOr<std::optional<ExportRecord>>
readDatasetTokenizer(const std::string &prefix);

/// The files of the HF model directory `dir` an export copies: its
/// tokenizer's and its generation_config.json, each read and hashed now;
/// `warnings` gets a line for a file that cannot be read (a FIFO, an I/O
/// error), which leaves out its group.
ExportRecord modelDirectoryFiles(const std::string &dir,
                                 std::vector<std::string> &warnings);

/// A run's record: the tokenizer of its indexed datasets `datasetPrefixes`
/// (those with a record; when two disagree, none), else that of
/// `modelDirectory`; the model directory's generation_config.json.
/// `warnings` gets a line for each record that cannot be read, datasets of
/// different tokenizers, and a model directory whose tokenizer is not the
/// data's.
ExportRecord chooseExportRecord(
    const std::vector<std::string> &datasetPrefixes,
    const std::optional<std::string> &modelDirectory,
    std::vector<std::string> &warnings);

/// What an export writes beside config.json and model.safetensors.
struct ExportContents {
  /// Each file's name in the export and its bytes, in the order written.
  std::vector<std::pair<std::string, std::string>> files;
  /// A line for each recorded file left out, and why.
  std::vector<std::string> warnings;
};

/// The files of `record` whose bytes still have the recorded size and hash
/// (the tokenizer's all or none), and generation_config.json: the recorded
/// one, else one written from the special-token ids of `configJson` (the
/// export's config.json), when it has any.
ExportContents loadExportFiles(const ExportRecord &record,
                               const std::string &configJson);

/// generation_config.json's text for the special-token ids of the
/// config.json text `configJson` (bos_token_id, eos_token_id, pad_token_id,
/// as transformers' GenerationConfig.from_model_config takes them); none
/// when it has none, or is not a JSON object.
std::optional<std::string> generationConfigOf(const std::string &configJson);

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_EXPORTFILES_H
