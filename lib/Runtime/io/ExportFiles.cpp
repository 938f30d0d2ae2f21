//===- ExportFiles.cpp - what an HF export copies beside its weights ------===//
//
// Part of mlt. See ExportFiles.h: the records of a tokenizer (a dataset's,
// a model directory's, a checkpoint's), the choice of a run's, and the
// files read back against them for an export.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/ExportFiles.h"

#include "mlt/Support/ContentHash.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/HFModelDirectory.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sys/stat.h>

using namespace mlt;
using namespace mlt::rt;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

/// The largest file an export copies: tokenizers are megabytes (Llama 3's
/// tokenizer.json is 9 MB); a record naming a file of gigabytes is not a
/// tokenizer's.
constexpr uint64_t kMaxCopiedBytes = uint64_t(256) << 20;

/// The record mlt-tokenize writes beside a dataset, and its version.
constexpr const char *kDatasetRecordFormat = "mlt-tokenize";
constexpr int kDatasetRecordVersion = 1;
constexpr const char *kDatasetRecordSuffix = ".meta.json";

bool isTokenizerFile(const std::string &name) {
  for (const char *known : kHFTokenizerFiles)
    if (name == known)
      return true;
  return false;
}

/// The bytes of the file at `path`: a regular file (a FIFO would block the
/// read) of at most kMaxCopiedBytes.
StatusOr<std::string> readSmallFile(const std::string &path) {
  MLT_RETURN_IF_ERROR(checkInputPath(path));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errorf(path, ": cannot be read: ", std::strerror(errno));
  if (uint64_t(st.st_size) > kMaxCopiedBytes)
    return errorf(path, ": ", uint64_t(st.st_size), " bytes, more than a ",
                  "tokenizer's file holds (", kMaxCopiedBytes, " at most)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    return errorf(path, ": cannot be read");
  return bytes;
}

/// `name`'s record of the file at `path`, read and hashed now.
StatusOr<RecordedFile> recordFile(const std::string &name,
                                  const std::string &path) {
  StatusOr<std::string> bytes = readSmallFile(path);
  if (!bytes)
    return bytes.takeStatus();
  RecordedFile file;
  file.name = name;
  file.path = fs::absolute(path).lexically_normal().string();
  file.bytes = bytes->size();
  file.xxh3 = formatContentHash(contentHash(bytes->data(), bytes->size()));
  return file;
}

/// The bytes of `file` where they still have its recorded size and hash;
/// else why not, in words that follow the path.
StatusOr<std::string> readRecorded(const RecordedFile &file) {
  StatusOr<std::string> bytes = readSmallFile(file.path);
  if (!bytes)
    return bytes.takeStatus();
  const std::string hash =
      formatContentHash(contentHash(bytes->data(), bytes->size()));
  if (bytes->size() != file.bytes || hash != file.xxh3)
    return errorf(file.path, " has changed since it was recorded (",
                  bytes->size(), " bytes of XXH3 ", hash, "; recorded: ",
                  file.bytes, " bytes of XXH3 ", file.xxh3, ")");
  return std::move(*bytes);
}

json fileJson(const RecordedFile &file) {
  return {{"name", file.name},
          {"path", file.path},
          {"bytes", file.bytes},
          {"xxh3", file.xxh3}};
}

/// A recorded file, checked: a name `isName` accepts, an absolute path, a
/// size, a hash of 16 hex digits.
StatusOr<RecordedFile> fileOf(const json &entry,
                              bool (*isName)(const std::string &)) {
  if (!entry.is_object())
    return errorf("a file's entry is not an object");
  auto string = [&](const char *key) -> std::optional<std::string> {
    auto it = entry.find(key);
    if (it == entry.end() || !it->is_string())
      return std::nullopt;
    return it->get<std::string>();
  };
  std::optional<std::string> name = string("name"), path = string("path"),
                             xxh3 = string("xxh3");
  auto bytes = entry.find("bytes");
  if (!name || !path || !xxh3 || bytes == entry.end() ||
      !bytes->is_number_unsigned())
    return errorf("a file's entry lacks its name, path, bytes or xxh3");
  // (the name becomes a file of the export: only the names exports write)
  if (!isName(*name))
    return errorf("names '", printableText(*name),
                  "', not a file an HF export copies");
  if (path->empty() || (*path)[0] != '/')
    return errorf("the path of ", *name, " is not absolute");
  if (!parseContentHash(*xxh3))
    return errorf("the hash of ", *name, " is not 16 hex digits");
  RecordedFile file;
  file.name = *name;
  file.path = *path;
  file.bytes = bytes->get<uint64_t>();
  file.xxh3 = *xxh3;
  return file;
}

bool isGenerationConfig(const std::string &name) {
  return name == kHFGenerationConfigFile;
}

/// The tokenizer's files of a record's "tokenizer" object: a tokenizer
/// (tokenizer.json or tokenizer.model) and the files that configure it,
/// each name once.
StatusOr<std::vector<RecordedFile>> tokenizerFilesOf(const json &tokenizer) {
  if (!tokenizer.is_object() || !tokenizer.contains("files") ||
      !tokenizer.at("files").is_array())
    return errorf("\"tokenizer\" holds no list of files");
  std::vector<RecordedFile> files;
  std::set<std::string> names;
  for (const json &entry : tokenizer.at("files")) {
    StatusOr<RecordedFile> file = fileOf(entry, isTokenizerFile);
    if (!file)
      return file.takeStatus();
    if (!names.insert(file->name).second)
      return errorf("names ", file->name, " twice");
    files.push_back(std::move(*file));
  }
  if (!names.count("tokenizer.json") && !names.count("tokenizer.model"))
    return errorf("names neither tokenizer.json nor tokenizer.model");
  return files;
}

/// Whether two tokenizers are one: the same files by name and hash
/// (wherever they lie).
bool sameTokenizer(const std::vector<RecordedFile> &a,
                   const std::vector<RecordedFile> &b) {
  auto contents = [](const std::vector<RecordedFile> &files) {
    std::set<std::pair<std::string, std::string>> set;
    for (const RecordedFile &file : files)
      set.insert({file.name, file.xxh3});
    return set;
  };
  return contents(a) == contents(b);
}

/// A JSON text's object, or why not.
StatusOr<json> parseObject(const std::string &text) {
  if (std::optional<size_t> at = jsonTooDeepAt(text))
    return errorf(jsonTooDeepMessage(*at));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return errorf("not valid JSON");
  if (!parsed.is_object())
    return errorf("not a JSON object");
  return parsed;
}

} // namespace

std::string ExportRecord::toJson() const {
  json record = json::object();
  if (!tokenizer.empty()) {
    json files = json::array();
    for (const RecordedFile &file : tokenizer)
      files.push_back(fileJson(file));
    record["tokenizer"] = {{"origin", tokenizerOrigin}, {"files", files}};
  }
  if (generationConfig)
    record["generation_config"] = fileJson(*generationConfig);
  return record.dump();
}

StatusOr<ExportRecord> ExportRecord::fromJson(const std::string &text) {
  StatusOr<json> parsed = parseObject(text);
  if (!parsed)
    return parsed.takeStatus();
  ExportRecord record;
  if (auto it = parsed->find("tokenizer"); it != parsed->end()) {
    StatusOr<std::vector<RecordedFile>> files = tokenizerFilesOf(*it);
    if (!files)
      return files.takeStatus().withContext("the tokenizer");
    record.tokenizer = std::move(*files);
    auto origin = it->find("origin");
    record.tokenizerOrigin = origin != it->end() && origin->is_string()
                                 ? origin->get<std::string>()
                                 : "a training checkpoint";
  }
  if (auto it = parsed->find("generation_config"); it != parsed->end()) {
    StatusOr<RecordedFile> file = fileOf(*it, isGenerationConfig);
    if (!file)
      return file.takeStatus().withContext("generation_config");
    record.generationConfig = std::move(*file);
  }
  return record;
}

StatusOr<std::optional<ExportRecord>>
mlt::rt::readDatasetTokenizer(const std::string &prefix) {
  const std::string path = prefix + kDatasetRecordSuffix;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT)
    return std::optional<ExportRecord>();
  StatusOr<std::string> text = readSmallFile(path);
  if (!text)
    return text.takeStatus();
  StatusOr<json> parsed = parseObject(*text);
  auto notARecord = [&](const std::string &why) {
    return errorf(path, ": not a record of mlt-tokenize (", why, ")");
  };
  if (!parsed)
    return notARecord(parsed.status().message());
  if (parsed->value("format", json()) != kDatasetRecordFormat ||
      parsed->value("version", json()) != kDatasetRecordVersion)
    return notARecord(std::string("its format is not ") +
                      kDatasetRecordFormat + " version " +
                      std::to_string(kDatasetRecordVersion));
  auto tokenizer = parsed->find("tokenizer");
  if (tokenizer == parsed->end())
    return notARecord("no \"tokenizer\"");
  StatusOr<std::vector<RecordedFile>> files = tokenizerFilesOf(*tokenizer);
  if (!files)
    return notARecord("its tokenizer " + files.status().message());
  ExportRecord record;
  record.tokenizer = std::move(*files);
  record.tokenizerOrigin = path;
  return std::optional<ExportRecord>(std::move(record));
}

ExportRecord mlt::rt::modelDirectoryFiles(const std::string &dir,
                                          std::vector<std::string> &warnings) {
  ExportRecord record;
  record.tokenizerOrigin = "the model directory " + dir;
  auto present = [&](const std::string &path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  };
  for (const char *name : kHFTokenizerFiles) {
    const std::string path = (fs::path(dir) / name).string();
    if (!present(path))
      continue;
    StatusOr<RecordedFile> file = recordFile(name, path);
    if (!file) {
      warnings.push_back(file.status().message() +
                         "; exports carry no tokenizer of " +
                         record.tokenizerOrigin);
      record.tokenizer.clear();
      break;
    }
    record.tokenizer.push_back(std::move(*file));
  }
  // (configuration files alone are no tokenizer AutoTokenizer can load)
  const bool hasTokenizer =
      std::any_of(record.tokenizer.begin(), record.tokenizer.end(),
                  [](const RecordedFile &file) {
                    return file.name == "tokenizer.json" ||
                           file.name == "tokenizer.model";
                  });
  if (!hasTokenizer)
    record.tokenizer.clear();
  const std::string generation =
      (fs::path(dir) / kHFGenerationConfigFile).string();
  if (present(generation)) {
    StatusOr<RecordedFile> file =
        recordFile(kHFGenerationConfigFile, generation);
    if (file)
      record.generationConfig = std::move(*file);
    else
      warnings.push_back(file.status().message() +
                         "; exports write a generation_config.json of "
                         "config.json's token ids instead");
  }
  return record;
}

ExportRecord mlt::rt::chooseExportRecord(
    const std::vector<std::string> &datasetPrefixes,
    const std::optional<std::string> &modelDirectory,
    std::vector<std::string> &warnings) {
  // The data's tokenizer: every dataset that records one agreeing.
  std::optional<ExportRecord> data;
  bool disagree = false;
  for (const std::string &prefix : datasetPrefixes) {
    StatusOr<std::optional<ExportRecord>> read = readDatasetTokenizer(prefix);
    if (!read) {
      warnings.push_back(read.status().message() +
                         "; exports carry no tokenizer of it");
      continue;
    }
    if (!*read)
      continue;
    if (!data) {
      data = std::move(**read);
    } else if (!disagree && !sameTokenizer(data->tokenizer,
                                           (*read)->tokenizer)) {
      disagree = true;
      warnings.push_back("the datasets were made by different tokenizers (" +
                         data->tokenizerOrigin + ", " +
                         (*read)->tokenizerOrigin +
                         "); exports carry no tokenizer");
    }
  }
  ExportRecord record;
  ExportRecord directory;
  if (modelDirectory)
    directory = modelDirectoryFiles(*modelDirectory, warnings);
  record.generationConfig = directory.generationConfig;
  if (disagree)
    return record;
  if (data) {
    record.tokenizer = data->tokenizer;
    record.tokenizerOrigin = data->tokenizerOrigin;
    if (!directory.tokenizer.empty() &&
        !sameTokenizer(directory.tokenizer, data->tokenizer))
      warnings.push_back(directory.tokenizerOrigin +
                         " holds another tokenizer than the one the data "
                         "was made with (" +
                         data->tokenizerOrigin +
                         "); exports carry the data's");
    return record;
  }
  record.tokenizer = directory.tokenizer;
  record.tokenizerOrigin = directory.tokenizerOrigin;
  return record;
}

ExportContents mlt::rt::loadExportFiles(const ExportRecord &record,
                                        const std::string &configJson) {
  ExportContents contents;
  if (!record.tokenizer.empty()) {
    std::vector<std::pair<std::string, std::string>> files;
    Status problem = Status::ok();
    for (const RecordedFile &file : record.tokenizer) {
      StatusOr<std::string> bytes = readRecorded(file);
      if (!bytes) {
        problem = bytes.takeStatus();
        break;
      }
      files.push_back({file.name, std::move(*bytes)});
    }
    if (problem.isOk())
      contents.files.insert(contents.files.end(),
                            std::make_move_iterator(files.begin()),
                            std::make_move_iterator(files.end()));
    else
      contents.warnings.push_back("the tokenizer recorded in " +
                                  record.tokenizerOrigin +
                                  " is left out of the export: " +
                                  problem.message());
  }
  std::optional<std::string> generation;
  if (record.generationConfig) {
    StatusOr<std::string> bytes = readRecorded(*record.generationConfig);
    if (bytes)
      generation = std::move(*bytes);
    else
      contents.warnings.push_back(
          "the recorded generation_config.json is left out of the export: " +
          bytes.status().message() +
          "; one of config.json's token ids is written instead");
  }
  if (!generation)
    generation = generationConfigOf(configJson);
  if (generation)
    contents.files.push_back({kHFGenerationConfigFile, std::move(*generation)});
  return contents;
}

std::optional<std::string>
mlt::rt::generationConfigOf(const std::string &configJson) {
  StatusOr<json> config = parseObject(configJson);
  if (!config)
    return std::nullopt;
  ordered_json generation = ordered_json::object();
  for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    auto it = config->find(key);
    if (it == config->end())
      continue;
    bool ids = it->is_number_integer() || it->is_array();
    if (it->is_array())
      for (const json &element : *it)
        ids = ids && element.is_number_integer();
    if (ids)
      generation[key] = *it;
  }
  if (generation.empty())
    return std::nullopt;
  // (as transformers writes the generation config it derives from a model's
  // config: its generate() then reads the config's ids)
  ordered_json text = {{"_from_model_config", true}};
  text.update(generation);
  return text.dump(2) + "\n";
}
