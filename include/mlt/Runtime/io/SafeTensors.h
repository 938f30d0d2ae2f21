//===- SafeTensors.h - safetensors files and HF checkpoints -----*- C++ -*-===//
//
// Part of mlt. Reads and writes the `safetensors` format (an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape
// and byte range, then the raw little-endian data) and Hugging Face checkpoint
// directories built from it (`model.safetensors`, or shards listed by
// `model.safetensors.index.json`, next to `config.json`). Loading validates the
// file completely, so that a corrupt or mismatched checkpoint is reported by
// name here instead of surfacing as wrong numbers in training; writing produces
// files that HF transformers and the `safetensors` Python package load as they
// are, and replaces checkpoint directories atomically.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_SAFETENSORS_H
#define MLT_RUNTIME_IO_SAFETENSORS_H

#include "mlt/Support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::rt {

/// Element types of safetensors, spelled in files as `F32`, `BF16`, ...
enum class DType {
  Bool,
  U8,
  I8,
  U16,
  I16,
  F16,
  BF16,
  U32,
  I32,
  F32,
  U64,
  I64,
  F64,
};

/// The safetensors spelling of `dtype` ("F32", "BF16", ...).
const char *dtypeName(DType dtype);
/// Parses a safetensors dtype name; fails on names this library does not know.
StatusOr<DType> parseDType(std::string_view name);
/// Bytes per element.
size_t dtypeSize(DType dtype);
/// True for F16, BF16, F32 and F64.
bool isFloatDType(DType dtype);

/// One tensor: its element type, shape and row-major little-endian bytes.
struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// The product of `shape` (1 for a scalar).
  int64_t numElements() const;

  /// A tensor of `dtype` holding `values` rounded to nearest (ties to even)
  /// when `dtype` is narrower than float (BF16 by Bf16.h's floatToBF16: every
  /// NaN 0x7FC0); `dtype` must be a float dtype and `values.size()` must
  /// equal the product of `shape`.
  static Tensor fromFloats(DType dtype, std::vector<int64_t> shape,
                           const std::vector<float> &values);
  /// Like fromFloats, from doubles (exact for F64).
  static Tensor fromDoubles(DType dtype, std::vector<int64_t> shape,
                            const std::vector<double> &values);
  /// A tensor that copies `numElements(shape) * dtypeSize(dtype)` raw bytes
  /// from `data` (for integer dtypes, or data already in the file's layout).
  static Tensor fromRaw(DType dtype, std::vector<int64_t> shape,
                        const void *data);
};

/// Tensors by name; std::map keeps them sorted, the order files are written in.
using TensorMap = std::map<std::string, Tensor>;

/// Converts a float tensor (F16, BF16, F32, F64) to floats; fails, naming
/// `name`, for integer and bool dtypes.
StatusOr<std::vector<float>> toFloat32(const std::string &name,
                                       const Tensor &tensor);
/// Converts a float tensor (F16, BF16, F32, F64) to doubles; fails, naming
/// `name`, for integer and bool dtypes.
StatusOr<std::vector<double>> toFloat64(const std::string &name,
                                        const Tensor &tensor);

/// Reads and validates one `.safetensors` file: header length within the file,
/// the header valid JSON, every entry with a known dtype, a byte range that
/// matches its shape and lies inside the data section, and no two ranges
/// overlapping. Fills `metadata` (if given) from `__metadata__`. Errors name
/// the file and, where one is at fault, the tensor.
StatusOr<TensorMap>
readSafeTensors(const std::string &path,
                std::map<std::string, std::string> *metadata = nullptr);

/// One `.safetensors` file open for reading its tensors one at a time: the
/// header is read and validated as readSafeTensors validates it, and each
/// tensor's bytes are read when asked for (a checkpoint's shards are read
/// by many processes, each for the pieces its ranks hold).
class SafeTensorsFile {
public:
  /// A tensor's dtype, shape and byte range in the data section.
  struct Info {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };

  /// Opens `path` and validates its header; errors name the file.
  static StatusOr<SafeTensorsFile>
  open(const std::string &path,
       std::map<std::string, std::string> *metadata = nullptr);

  SafeTensorsFile(SafeTensorsFile &&other) noexcept;
  SafeTensorsFile &operator=(SafeTensorsFile &&other) noexcept;
  SafeTensorsFile(const SafeTensorsFile &) = delete;
  SafeTensorsFile &operator=(const SafeTensorsFile &) = delete;
  ~SafeTensorsFile();

  const std::string &path() const { return path_; }
  /// Where the data section begins: the length field and the header are
  /// the file's first dataStart() bytes.
  uint64_t dataStart() const { return dataStart_; }
  /// The XXH3 (ContentHash.h) of those bytes.
  uint64_t headerHash() const { return headerHash_; }
  /// The file's tensors by name.
  const std::map<std::string, Info> &tensors() const { return tensors_; }
  /// Reads tensor `name`; errors name the file and the tensor.
  StatusOr<Tensor> read(const std::string &name) const;

private:
  SafeTensorsFile() = default;
  int fd_ = -1;
  std::string path_;
  uint64_t dataStart_ = 0;
  uint64_t headerHash_ = 0;
  std::map<std::string, Info> tensors_;
};

/// The largest header readSafeTensors accepts: the header is read into
/// memory whole, and a real one holds about 100 bytes per tensor (a 405B
/// model's few thousand tensors, some 300 KB). The Rust `safetensors`
/// crate refuses headers past the same 100 MB.
inline constexpr uint64_t kMaxSafeTensorsHeaderBytes = 100'000'000;

/// readSafeTensors of a file's bytes held in memory: the same checks and
/// messages, prefixed with `source`.
StatusOr<TensorMap>
parseSafeTensors(std::string_view bytes, const std::string &source,
                 std::map<std::string, std::string> *metadata = nullptr);

/// Reads the weights of an HF checkpoint: `path` may be a `.safetensors` file,
/// or a directory holding `model.safetensors` or a sharded
/// `model.safetensors.index.json` (`{"weight_map": {name: file}}`), in which
/// case each listed tensor is taken from the file the index names. Fails when
/// a listed file is missing or a tensor is not where the index says.
StatusOr<TensorMap> readCheckpoint(const std::string &path);

/// A tensor a model expects: its name and shape.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

/// Checks that `tensors` holds exactly the `expected` names with the expected
/// shapes. On mismatch, one error line names the first missing tensor, the
/// first unexpected tensor and the first wrongly shaped tensor (with both
/// shapes), whichever occur, with counts of the rest.
Status checkTensors(const TensorMap &tensors,
                    const std::vector<ExpectedTensor> &expected);
/// The same for the names and shapes of tensors held elsewhere (a
/// checkpoint's index).
Status checkTensors(const std::vector<ExpectedTensor> &present,
                    const std::vector<ExpectedTensor> &expected);

/// Writes `tensors` as a `.safetensors` file: a compact JSON header with
/// `"__metadata__": {"format": "pt"}` (plus `metadata`), padded with spaces to
/// a multiple of 8 bytes, then the tensors' bytes in name order. The file is
/// written beside `path` and renamed over it when complete (AtomicFile.h's
/// writeFileAtomicallyWith), so a failed write leaves `path` as it was.
Status
writeSafeTensors(const std::string &path, const TensorMap &tensors,
                 const std::map<std::string, std::string> &metadata = {});

/// A tensor's name, dtype and shape: what a file's header says of it.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t numBytes() const;
};
/// Bytes the caller keeps alive until the next call for them.
struct ByteView {
  const uint8_t *data = nullptr;
  size_t size = 0;
};
/// Tensor i's bytes, asked for when its turn to be written comes.
using TensorBytes = std::function<StatusOr<ByteView>(size_t)>;

/// The XXH3 hashes (ContentHash.h) of a file as it was written: the whole
/// file, its first dataStart bytes (length field and header), and each
/// tensor's bytes in the order of the specs.
struct SafeTensorsDigest {
  uint64_t file = 0;
  uint64_t header = 0;
  std::vector<uint64_t> tensors;
};

/// writeSafeTensors of tensors produced one at a time: `specs` fix the
/// header (in their order), `bytesOf(i)` gives tensor i's bytes when they
/// are written, so that one tensor at a time is in memory (an HF checkpoint
/// of a model larger than the host's memory). With `digest`, hashes what it
/// writes as it goes (no second read).
Status writeSafeTensors(const std::string &path,
                        const std::vector<TensorSpec> &specs,
                        const TensorBytes &bytesOf,
                        const std::map<std::string, std::string> &metadata = {},
                        SafeTensorsDigest *digest = nullptr);

/// Files written beside an HF checkpoint's weights: each one's name (one of
/// HFModelDirectory.h's tokenizer files or generation_config.json) and
/// bytes (ExportFiles.h's loadExportFiles).
using ExtraFiles = std::vector<std::pair<std::string, std::string>>;

/// Writes an HF checkpoint directory at `dir`: `config.json` (the caller's
/// `configJson` text, which must be a JSON object; where it states a dtype,
/// "torch_dtype" or "dtype", that of the tensors, which transformers loads
/// them in), `model.safetensors` and the `extraFiles`. All
/// are written into a temporary sibling directory that then takes the place
/// of `dir` (placeDirectory). On any error `dir` is left as it was and the
/// temporary directory removed.
Status writeCheckpointDir(const std::string &dir, const std::string &configJson,
                          const TensorMap &tensors,
                          const ExtraFiles &extraFiles = {});
/// The same of tensors produced one at a time (writeSafeTensors above).
Status writeCheckpointDir(const std::string &dir, const std::string &configJson,
                          const std::vector<TensorSpec> &specs,
                          const TensorBytes &bytesOf,
                          const ExtraFiles &extraFiles = {});

/// Removes the temporary entries in `dir` whose names start with `prefix`
/// (".<name>.tmp-<pid>-..." and ".<name>.old-<pid>-...", as the writers
/// here and AtomicFile.h's name them) and whose writing process is gone:
/// what a killed write left behind. A living process's are left alone.
void removeStaleTemporaries(const std::string &dir,
                            const std::string &prefix = ".");

/// Whether writeCheckpointDir may write `dir`: it does not exist, or it is
/// a directory holding nothing but what that writes (config.json,
/// model.safetensors, generation_config.json and the tokenizer's files: an
/// earlier export). A directory with anything else is
/// the user's and is never replaced; the error names one of its entries.
Status checkReplaceableCheckpointDir(const std::string &dir);

/// Makes the complete directory `temporary` (a sibling of `dir`) take the
/// place of `dir`: renamed into place, or, where `dir` exists, swapped in
/// one step (renameat2's RENAME_EXCHANGE, where the file system has it) and
/// the old one removed, so that `dir` always names a complete directory. A
/// symbolic link or a file at `dir` is not replaced.
Status placeDirectory(const std::string &temporary, const std::string &dir);

/// Formats a shape as `[2, 3]` for messages.
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_SAFETENSORS_H
