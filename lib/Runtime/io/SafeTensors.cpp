//===- SafeTensors.cpp - safetensors files and HF checkpoints -------------===//
//
// Part of mlt. Implements the safetensors reader and writer and the HF
// checkpoint directory helpers declared in SafeTensors.h. Files are read with
// POSIX `pread` (one read per tensor, no re-reads) and written through a
// temporary name that is fsync'ed and renamed into place, so a crash or an
// error never leaves a half-written checkpoint under the final name.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/ContentHash.h"
#include "mlt/Support/Bf16.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/HFModelDirectory.h"
#include "mlt/Support/JsonDepth.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

// Tensor bytes are kept in the file's little-endian layout and reinterpreted
// with memcpy; a big-endian host would need byte swaps everywhere.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "mlt's safetensors I/O assumes a little-endian host");

namespace mlt::rt {

//===----------------------------------------------------------------------===//
// DType
//===----------------------------------------------------------------------===//

namespace {
struct DTypeInfo {
  DType dtype;
  const char *name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::Bool, "BOOL", 1}, {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4}, {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8}, {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},
};

const DTypeInfo &info(DType dtype) {
  for (const DTypeInfo &entry : kDTypes)
    if (entry.dtype == dtype)
      return entry;
  assert(false && "DType missing from kDTypes");
  return kDTypes[0];
}
} // namespace

const char *dtypeName(DType dtype) { return info(dtype).name; }

size_t dtypeSize(DType dtype) { return info(dtype).size; }

StatusOr<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &entry : kDTypes)
    if (name == entry.name)
      return entry.dtype;
  return errorf("unknown dtype '", name, "'");
}

bool isFloatDType(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 ||
         dtype == DType::F64;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  return formatInts(shape);
}

//===----------------------------------------------------------------------===//
// Float conversions
//===----------------------------------------------------------------------===//

namespace {
uint32_t bitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float floatOf(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE half <-> float without branches on the common path, after Marat
// Dukhan's FP16 library: the float unit does the rounding (to nearest, ties
// to even) and the subnormal handling.
float f16ToFloat(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;
  const uint32_t expOffset = 0xE0u << 23;
  const float normalized = floatOf((twoW >> 4) + expOffset) * 0x1.0p-112f;
  const uint32_t magicMask = 126u << 23;
  const float denormalized = floatOf((twoW >> 17) | magicMask) - 0.5f;
  const uint32_t denormalizedCutoff = 1u << 27;
  return floatOf(sign | (twoW < denormalizedCutoff ? bitsOf(denormalized)
                                                   : bitsOf(normalized)));
}

uint16_t floatToF16(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = bitsOf(f);
  const uint32_t shl1W = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1W & 0xFF000000u;
  if (bias < 0x71000000u)
    bias = 0x71000000u;
  base = floatOf((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bitsOf(base);
  const uint32_t expBits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissaBits = bits & 0x00000FFFu;
  const uint32_t nonsign = expBits + mantissaBits;
  return uint16_t((sign >> 16) | (shl1W > 0xFF000000u ? 0x7E00u : nonsign));
}

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

template <typename T> void store(uint8_t *p, T value) {
  std::memcpy(p, &value, sizeof value);
}

/// Converts element i of a float tensor to double.
double floatElement(DType dtype, const uint8_t *data, size_t i) {
  switch (dtype) {
  case DType::F16:
    return f16ToFloat(load<uint16_t>(data + 2 * i));
  case DType::BF16:
    return bf16ToFloat(load<uint16_t>(data + 2 * i));
  case DType::F32:
    return load<float>(data + 4 * i);
  case DType::F64:
    return load<double>(data + 8 * i);
  default:
    assert(false && "not a float dtype");
    return 0;
  }
}

size_t elementCount(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t d : shape)
    n *= size_t(d);
  return n;
}

template <typename Out>
StatusOr<std::vector<Out>> toFloats(const std::string &name,
                                    const Tensor &tensor) {
  if (!isFloatDType(tensor.dtype))
    return errorf("tensor '", name, "' has dtype ", dtypeName(tensor.dtype),
                  ", not a float dtype");
  size_t n = elementCount(tensor.shape);
  if (tensor.bytes.size() != n * dtypeSize(tensor.dtype))
    return errorf("tensor '", name, "' has ", tensor.bytes.size(),
                  " bytes, but its shape ", formatShape(tensor.shape),
                  " and dtype ", dtypeName(tensor.dtype), " need ",
                  n * dtypeSize(tensor.dtype));
  std::vector<Out> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = Out(floatElement(tensor.dtype, tensor.bytes.data(), i));
  return out;
}

template <typename In>
Tensor fromFloating(DType dtype, std::vector<int64_t> shape,
                    const std::vector<In> &values) {
  assert(isFloatDType(dtype) && "fromFloats needs a float dtype");
  assert(values.size() == elementCount(shape) && "values do not fit shape");
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * dtypeSize(dtype));
  uint8_t *p = t.bytes.data();
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
    case DType::F16:
      store(p + 2 * i, floatToF16(float(values[i])));
      break;
    case DType::BF16:
      store(p + 2 * i, floatToBF16(float(values[i])));
      break;
    case DType::F32:
      store(p + 4 * i, float(values[i]));
      break;
    case DType::F64:
      store(p + 8 * i, double(values[i]));
      break;
    default:
      break;
    }
  }
  return t;
}
} // namespace

int64_t Tensor::numElements() const { return int64_t(elementCount(shape)); }

Tensor Tensor::fromFloats(DType dtype, std::vector<int64_t> shape,
                          const std::vector<float> &values) {
  return fromFloating(dtype, std::move(shape), values);
}

Tensor Tensor::fromDoubles(DType dtype, std::vector<int64_t> shape,
                           const std::vector<double> &values) {
  return fromFloating(dtype, std::move(shape), values);
}

Tensor Tensor::fromRaw(DType dtype, std::vector<int64_t> shape,
                       const void *data) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(elementCount(t.shape) * dtypeSize(dtype));
  if (!t.bytes.empty())
    std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

StatusOr<std::vector<float>> toFloat32(const std::string &name,
                                       const Tensor &tensor) {
  return toFloats<float>(name, tensor);
}

StatusOr<std::vector<double>> toFloat64(const std::string &name,
                                        const Tensor &tensor) {
  return toFloats<double>(name, tensor);
}

//===----------------------------------------------------------------------===//
// POSIX file helpers
//===----------------------------------------------------------------------===//

namespace {
/// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  int get() const { return fd_; }
  /// Gives the descriptor up, unclosed.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Closes now, reporting the error close() can return (delayed write
  /// errors on some file systems).
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

private:
  int fd_;
};

std::string errnoText() { return std::strerror(errno); }

/// Opens `path` to read, refusing what is not a regular file (O_NONBLOCK: a
/// FIFO opens at once, to be refused, rather than blocking until a writer
/// comes; reads of a regular file ignore it), and sets `size` to its size.
StatusOr<int> openRegularFile(const std::string &path, uint64_t &size) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0)
    return errorf("cannot open: ", errnoText());
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    return errorf("cannot stat: ", errnoText());
  if (std::optional<std::string> kind = nonRegularKind(st))
    return errorf("is ", *kind, ", not a file");
  size = uint64_t(st.st_size);
  return fd.release();
}

/// Reads exactly `size` bytes at `offset`.
Status readAt(int fd, uint8_t *out, size_t size, uint64_t offset,
              const std::string &path) {
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errorf(path, ": read failed: ", errnoText());
    if (n == 0)
      return errorf(path, ": unexpected end of file at byte ", offset);
    out += n;
    size -= size_t(n);
    offset += uint64_t(n);
  }
  return Status::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {
/// Reads a non-negative JSON integer.
bool getUnsigned(const json &value, uint64_t &out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    out = uint64_t(value.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

/// Validates one header entry against the data section size.
StatusOr<Entry> parseEntry(const std::string &name, const json &value,
                           uint64_t dataSize) {
  auto fail = [&](const auto &...parts) {
    return errorf("tensor '", name, "': ", parts...);
  };
  if (!value.is_object())
    return fail("header entry is not a JSON object");
  Entry entry;
  entry.name = name;

  auto dtypeIt = value.find("dtype");
  if (dtypeIt == value.end() || !dtypeIt->is_string())
    return fail("missing or non-string 'dtype'");
  StatusOr<DType> dtype = parseDType(dtypeIt->get<std::string>());
  if (!dtype)
    return fail(dtype.status().message());
  entry.dtype = *dtype;

  auto shapeIt = value.find("shape");
  if (shapeIt == value.end() || !shapeIt->is_array())
    return fail("missing or non-array 'shape'");
  // Overflow is tracked so that absurd shapes fail the size check below
  // instead of wrapping around to a plausible size; a zero dimension still
  // makes the tensor empty.
  uint64_t numBytes = dtypeSize(entry.dtype);
  bool overflow = false, hasZero = false;
  for (const json &dim : *shapeIt) {
    uint64_t d;
    if (!getUnsigned(dim, d) || d > uint64_t(INT64_MAX))
      return fail("'shape' ", shapeIt->dump(),
                  " holds something other than a non-negative integer");
    entry.shape.push_back(int64_t(d));
    hasZero |= d == 0;
    overflow |= __builtin_mul_overflow(numBytes, d, &numBytes);
  }
  if (hasZero) {
    numBytes = 0;
    overflow = false;
  }

  auto offsetsIt = value.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (offsetsIt == value.end() || !offsetsIt->is_array() ||
      offsetsIt->size() != 2 || !getUnsigned((*offsetsIt)[0], begin) ||
      !getUnsigned((*offsetsIt)[1], end))
    return fail("'data_offsets' must be an array of two non-negative integers");
  if (begin > end)
    return fail("data_offsets [", begin, ", ", end, "] end before they begin");
  if (end > dataSize)
    return fail("data_offsets [", begin, ", ", end,
                "] reach past the end of the data section (", dataSize,
                " bytes)");
  if (overflow || end - begin != numBytes)
    return fail("data_offsets [", begin, ", ", end, "] span ", end - begin,
                " bytes, but shape ", formatShape(entry.shape), " of ",
                dtypeName(entry.dtype), " needs ",
                overflow ? std::string("more than 2^64")
                         : std::to_string(numBytes));
  entry.begin = begin;
  entry.end = end;
  return entry;
}

/// The header's tensors, validated against a data section of `dataSize`
/// bytes (each range inside it, sized by its shape, none overlapping
/// another); fills `metadata` (if given). Errors are prefixed by the
/// caller.
StatusOr<std::map<std::string, SafeTensorsFile::Info>>
parseHeader(const std::string &headerText, uint64_t dataSize,
            std::map<std::string, std::string> *metadata) {
  json header;
  try {
    if (std::optional<size_t> at = jsonTooDeepAt(headerText))
      return errorf("the header ", jsonTooDeepMessage(*at));
    header = json::parse(headerText);
  } catch (const json::exception &e) {
    return errorf("header is not valid JSON: ", e.what());
  }
  if (!header.is_object())
    return errorf("header is not a JSON object");

  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object())
        return errorf("'__metadata__' is not a JSON object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          return errorf("'__metadata__' value of '", m.key(),
                        "' is not a string");
        if (metadata)
          (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    StatusOr<Entry> entry = parseEntry(it.key(), it.value(), dataSize);
    if (!entry)
      return entry.takeStatus();
    entries.push_back(std::move(*entry));
  }

  // Sorted by offset, each non-empty range must start at or after the end of
  // the previous one; empty tensors occupy no bytes and overlap nothing.
  std::sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry *previous = nullptr;
  for (const Entry &entry : entries) {
    if (entry.begin == entry.end)
      continue;
    if (previous && entry.begin < previous->end)
      return errorf("tensors '", previous->name, "' (bytes ", previous->begin,
                    "..", previous->end, ") and '", entry.name, "' (bytes ",
                    entry.begin, "..", entry.end, ") overlap");
    previous = &entry;
  }

  std::map<std::string, SafeTensorsFile::Info> infos;
  for (Entry &entry : entries)
    infos.emplace(entry.name, SafeTensorsFile::Info{entry.dtype,
                                                    std::move(entry.shape),
                                                    entry.begin, entry.end});
  return infos;
}

/// The header's length (the file's first 8 bytes, `lengthBytes`), checked
/// against the `fileSize` bytes of the file.
StatusOr<uint64_t> headerLength(const uint8_t *lengthBytes,
                                uint64_t fileSize) {
  if (fileSize < 8)
    return errorf("file has ", fileSize,
                  " bytes, too short for the 8-byte header length");
  const uint64_t headerSize = load<uint64_t>(lengthBytes);
  if (headerSize > fileSize - 8)
    return errorf("header length ", headerSize, " exceeds the ", fileSize - 8,
                  " bytes after the length field");
  // (the text is read into memory whole: a header of gigabytes, which a
  // sparse file can claim, is refused before it is allocated)
  if (headerSize > kMaxSafeTensorsHeaderBytes)
    return errorf("header length ", headerSize, " is beyond the ",
                  kMaxSafeTensorsHeaderBytes,
                  " bytes of header this reader accepts");
  return headerSize;
}

/// Opens and validates `path`'s header (see SafeTensorsFile::open); errors
/// are prefixed by the caller.
Status openSafeTensors(const std::string &path, int &fdOut,
                       uint64_t &dataStartOut, uint64_t &headerHashOut,
                       std::map<std::string, SafeTensorsFile::Info> &infos,
                       std::map<std::string, std::string> *metadata) {
  uint64_t fileSize = 0;
  StatusOr<int> opened = openRegularFile(path, fileSize);
  if (!opened)
    return opened.takeStatus();
  FileDescriptor fd(*opened);

  uint8_t lengthBytes[8] = {};
  if (fileSize >= 8)
    MLT_RETURN_IF_ERROR(readAt(fd.get(), lengthBytes, 8, 0, path));
  StatusOr<uint64_t> headerSize = headerLength(lengthBytes, fileSize);
  if (!headerSize)
    return headerSize.takeStatus();
  const uint64_t dataStart = 8 + *headerSize;
  std::string headerText(*headerSize, '\0');
  MLT_RETURN_IF_ERROR(readAt(fd.get(),
                             reinterpret_cast<uint8_t *>(headerText.data()),
                             *headerSize, 8, path));
  StatusOr<std::map<std::string, SafeTensorsFile::Info>> parsed =
      parseHeader(headerText, fileSize - dataStart, metadata);
  if (!parsed)
    return parsed.takeStatus();
  infos = std::move(*parsed);
  dataStartOut = dataStart;
  ContentHasher headerHash;
  headerHash.update(lengthBytes, 8);
  headerHash.update(headerText.data(), headerText.size());
  headerHashOut = headerHash.digest();
  fdOut = ::dup(fd.get());
  if (fdOut < 0)
    return errorf("cannot keep open: ", errnoText());
  return Status::ok();
}

/// Reads a JSON file; errors are prefixed by the caller.
StatusOr<json> readJsonFile(const fs::path &path) {
  uint64_t size = 0;
  StatusOr<int> opened = openRegularFile(path.string(), size);
  if (!opened)
    return opened.takeStatus();
  FileDescriptor fd(*opened);
  std::string text(size_t(size), '\0');
  MLT_RETURN_IF_ERROR(readAt(fd.get(), reinterpret_cast<uint8_t *>(text.data()),
                             text.size(), 0, path.string()));
  try {
    if (std::optional<size_t> at = jsonTooDeepAt(text))
      return errorf("not valid JSON: it ", jsonTooDeepMessage(*at));
    return json::parse(text);
  } catch (const json::exception &e) {
    return errorf("not valid JSON: ", e.what());
  }
}

StatusOr<TensorMap> readShardedCheckpoint(const fs::path &dir,
                                          const fs::path &indexPath) {
  const std::string where = indexPath.string();
  StatusOr<json> index = readJsonFile(indexPath);
  if (!index)
    return index.takeStatus().withContext(where);
  auto weightMap = index->find("weight_map");
  if (!index->is_object() || weightMap == index->end() ||
      !weightMap->is_object())
    return errorf(where, ": no 'weight_map' object");

  // Group the names by shard so that each shard is read once.
  std::map<std::string, std::vector<std::string>> namesByShard;
  for (auto it = weightMap->begin(); it != weightMap->end(); ++it) {
    if (!it.value().is_string())
      return errorf(where, ": 'weight_map' entry of tensor '", it.key(),
                    "' is not a file name");
    namesByShard[it.value().get<std::string>()].push_back(it.key());
  }

  TensorMap tensors;
  for (auto &[shard, names] : namesByShard) {
    fs::path shardPath = dir / shard;
    // What is wrong with it, in words: missing, a directory, a symbolic
    // link loop, a FIFO.
    if (Status problem = checkInputPath(shardPath.string()); !problem.isOk())
      return errorf(where, ": shard file '", shard, "' (listed for tensor '",
                    names.front(), "'): ", problem.message());
    StatusOr<TensorMap> shardTensors = readSafeTensors(shardPath.string());
    if (!shardTensors)
      return shardTensors.takeStatus();
    for (const std::string &name : names) {
      auto found = shardTensors->find(name);
      if (found == shardTensors->end())
        return errorf(where, ": tensor '", name, "' is not in '", shard,
                      "' where the index places it");
      tensors.emplace(name, std::move(found->second));
    }
  }
  return tensors;
}
} // namespace

StatusOr<SafeTensorsFile>
SafeTensorsFile::open(const std::string &path,
                      std::map<std::string, std::string> *metadata) {
  SafeTensorsFile file;
  file.path_ = path;
  Status opened =
      openSafeTensors(path, file.fd_, file.dataStart_, file.headerHash_,
                      file.tensors_, metadata);
  if (!opened)
    return std::move(opened).withContext(path);
  return file;
}

SafeTensorsFile::SafeTensorsFile(SafeTensorsFile &&other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)),
      dataStart_(other.dataStart_), headerHash_(other.headerHash_),
      tensors_(std::move(other.tensors_)) {}

SafeTensorsFile &SafeTensorsFile::operator=(SafeTensorsFile &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    dataStart_ = other.dataStart_;
    headerHash_ = other.headerHash_;
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

StatusOr<Tensor> SafeTensorsFile::read(const std::string &name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end())
    return errorf(path_, ": no tensor '", name, "'");
  const Info &info = found->second;
  Tensor tensor;
  tensor.dtype = info.dtype;
  tensor.shape = info.shape;
  tensor.bytes.resize(info.end - info.begin);
  Status read = readAt(fd_, tensor.bytes.data(), tensor.bytes.size(),
                       dataStart_ + info.begin, path_);
  if (!read)
    return errorf(path_, ": tensor '", name, "': ", read.message());
  return tensor;
}

StatusOr<TensorMap>
readSafeTensors(const std::string &path,
                std::map<std::string, std::string> *metadata) {
  StatusOr<SafeTensorsFile> file = SafeTensorsFile::open(path, metadata);
  if (!file)
    return file.takeStatus();
  TensorMap tensors;
  for (const auto &[name, info] : file->tensors()) {
    StatusOr<Tensor> tensor = file->read(name);
    if (!tensor)
      return tensor.takeStatus();
    tensors.emplace(name, std::move(*tensor));
  }
  return tensors;
}

StatusOr<TensorMap>
parseSafeTensors(std::string_view bytes, const std::string &source,
                 std::map<std::string, std::string> *metadata) {
  const auto *data = reinterpret_cast<const uint8_t *>(bytes.data());
  StatusOr<uint64_t> headerSize = headerLength(data, bytes.size());
  if (!headerSize)
    return headerSize.takeStatus().withContext(source);
  const uint64_t dataStart = 8 + *headerSize;
  StatusOr<std::map<std::string, SafeTensorsFile::Info>> infos =
      parseHeader(std::string(bytes.substr(8, *headerSize)),
                  bytes.size() - dataStart, metadata);
  if (!infos)
    return infos.takeStatus().withContext(source);
  TensorMap tensors;
  for (auto &[name, info] : *infos) {
    Tensor tensor;
    tensor.dtype = info.dtype;
    tensor.shape = std::move(info.shape);
    tensor.bytes.assign(data + dataStart + info.begin,
                        data + dataStart + info.end);
    tensors.emplace(name, std::move(tensor));
  }
  return tensors;
}

StatusOr<TensorMap> readCheckpoint(const std::string &path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (!fs::is_directory(status)) {
    MLT_RETURN_IF_ERROR(checkInputPath(path));
    return readSafeTensors(path);
  }

  // Like HF transformers, a single model.safetensors wins over an index.
  fs::path dir(path);
  fs::path single = dir / "model.safetensors";
  if (fs::exists(single, ec))
    return readSafeTensors(single.string());
  fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec))
    return readShardedCheckpoint(dir, index);
  return errorf(path,
                ": neither model.safetensors nor model.safetensors.index.json "
                "in this directory");
}

//===----------------------------------------------------------------------===//
// Checking
//===----------------------------------------------------------------------===//

Status checkTensors(const TensorMap &tensors,
                    const std::vector<ExpectedTensor> &expected) {
  std::vector<ExpectedTensor> present;
  for (const auto &[name, tensor] : tensors)
    present.push_back({name, tensor.shape});
  return checkTensors(present, expected);
}

Status checkTensors(const std::vector<ExpectedTensor> &present,
                    const std::vector<ExpectedTensor> &expected) {
  std::map<std::string, std::vector<int64_t>> tensors;
  for (const ExpectedTensor &tensor : present)
    tensors.emplace(tensor.name, tensor.shape);
  const ExpectedTensor *firstMissing = nullptr, *firstMisshapen = nullptr;
  size_t numMissing = 0, numMisshapen = 0;
  std::set<std::string> expectedNames;
  for (const ExpectedTensor &e : expected) {
    expectedNames.insert(e.name);
    auto it = tensors.find(e.name);
    if (it == tensors.end()) {
      if (!numMissing++)
        firstMissing = &e;
    } else if (it->second != e.shape) {
      if (!numMisshapen++)
        firstMisshapen = &e;
    }
  }
  const std::string *firstExtra = nullptr;
  size_t numExtra = 0;
  for (const auto &[name, tensor] : tensors)
    if (!expectedNames.count(name) && !numExtra++)
      firstExtra = &name;

  if (!numMissing && !numExtra && !numMisshapen)
    return Status::ok();
  std::ostringstream os;
  const char *separator = "";
  auto more = [&](size_t n) {
    if (n > 1)
      os << " (and " << n - 1 << " more)";
  };
  if (numMissing) {
    os << "missing tensor '" << firstMissing->name << "'";
    more(numMissing);
    separator = "; ";
  }
  if (numExtra) {
    os << separator << "unexpected tensor '" << *firstExtra << "'";
    more(numExtra);
    separator = "; ";
  }
  if (numMisshapen) {
    os << separator << "tensor '" << firstMisshapen->name << "' has shape "
       << formatShape(tensors.at(firstMisshapen->name)) << ", expected "
       << formatShape(firstMisshapen->shape);
    more(numMisshapen);
  }
  return Status::error(os.str());
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {
/// Builds the padded header (without the length field) of tensors in the
/// order of `specs`.
StatusOr<std::string>
buildHeader(const std::vector<TensorSpec> &specs,
            const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  for (const auto &[key, value] : metadata)
    meta[key] = value;
  header["__metadata__"] = std::move(meta);

  uint64_t offset = 0;
  for (const TensorSpec &spec : specs) {
    if (spec.name == "__metadata__")
      return errorf("a tensor may not be named '__metadata__'");
    if (header.contains(spec.name))
      return errorf("tensor '", spec.name, "' is given twice");
    for (int64_t d : spec.shape)
      if (d < 0)
        return errorf("tensor '", spec.name,
                      "' has a negative dimension in shape ",
                      formatShape(spec.shape));
    const uint64_t bytes = spec.numBytes();
    header[spec.name] = {{"dtype", dtypeName(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception &e) {
    // dump() throws on names that are not valid UTF-8.
    return errorf("cannot encode the header: ", e.what());
  }
  // The format asks for 8-byte alignment of the data section start.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

/// Appends the file's bytes: the length of `header`, `header`, then the
/// tensors of `specs`, each's bytes from `bytesOf` in turn.
Status appendFile(const AppendBytes &append, const std::string &header,
                  const std::vector<TensorSpec> &specs,
                  const TensorBytes &bytesOf, SafeTensorsDigest *digest) {
  uint8_t lengthBytes[8];
  store<uint64_t>(lengthBytes, header.size());
  ContentHasher file;
  if (digest) {
    file.update(lengthBytes, 8);
    file.update(header.data(), header.size());
    digest->header = file.digest();
    digest->tensors.clear();
  }
  MLT_RETURN_IF_ERROR(append(lengthBytes, 8));
  MLT_RETURN_IF_ERROR(append(header.data(), header.size()));
  for (size_t i = 0; i < specs.size(); ++i) {
    StatusOr<ByteView> bytes = bytesOf(i);
    if (!bytes)
      return bytes.takeStatus().withContext("tensor '" + specs[i].name + "'");
    if (bytes->size != specs[i].numBytes())
      return errorf("tensor '", specs[i].name, "' holds ", bytes->size,
                    " bytes, but shape ", formatShape(specs[i].shape), " of ",
                    dtypeName(specs[i].dtype), " needs ", specs[i].numBytes());
    if (digest) {
      file.update(bytes->data, bytes->size);
      digest->tensors.push_back(contentHash(bytes->data, bytes->size));
    }
    Status written = append(bytes->data, bytes->size);
    if (!written.isOk())
      return std::move(written).withContext("tensor '" + specs[i].name + "'");
  }
  if (digest)
    digest->file = file.digest();
  return Status::ok();
}

/// The specs of `tensors`, in name order.
std::vector<TensorSpec> specsOf(const TensorMap &tensors) {
  std::vector<TensorSpec> specs;
  for (const auto &[name, tensor] : tensors)
    specs.push_back({name, tensor.dtype, tensor.shape});
  return specs;
}

/// Removes trailing slashes so that `filename()` names the last component.
fs::path withoutTrailingSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return fs::path(path);
}
} // namespace

uint64_t TensorSpec::numBytes() const {
  return uint64_t(elementCount(shape)) * dtypeSize(dtype);
}

Status writeSafeTensors(const std::string &path, const TensorMap &tensors,
                        const std::map<std::string, std::string> &metadata) {
  // (Each tensor's bytes are checked against its shape before any is
  // written: a mismatch leaves no file.)
  for (const auto &[name, tensor] : tensors)
    if (tensor.bytes.size() !=
        elementCount(tensor.shape) * dtypeSize(tensor.dtype))
      return errorf("tensor '", name, "' holds ", tensor.bytes.size(),
                    " bytes, but shape ", formatShape(tensor.shape), " of ",
                    dtypeName(tensor.dtype), " needs ",
                    elementCount(tensor.shape) * dtypeSize(tensor.dtype))
          .withContext(path);
  std::vector<const Tensor *> ordered;
  for (const auto &[name, tensor] : tensors)
    ordered.push_back(&tensor);
  return writeSafeTensors(
      path, specsOf(tensors),
      [&](size_t i) -> StatusOr<ByteView> {
        return ByteView{ordered[i]->bytes.data(), ordered[i]->bytes.size()};
      },
      metadata);
}

Status writeSafeTensors(const std::string &path,
                        const std::vector<TensorSpec> &specs,
                        const TensorBytes &bytesOf,
                        const std::map<std::string, std::string> &metadata,
                        SafeTensorsDigest *digest) {
  StatusOr<std::string> header = buildHeader(specs, metadata);
  if (!header)
    return header.takeStatus().withContext(path);

  return writeFileAtomicallyWith(path, [&](const AppendBytes &append) {
    return appendFile(append, *header, specs, bytesOf, digest);
  });
}

Status placeDirectory(const std::string &temporary, const std::string &dir) {
  fs::path target = withoutTrailingSlash(dir);
  fs::path parent = target.parent_path();
  std::error_code ec;
  fs::file_status targetStatus = fs::symlink_status(target, ec);
  // A symbolic link is not followed: swapping it out would replace the link,
  // not the checkpoint it points to.
  if (fs::is_symlink(targetStatus))
    return errorf(dir, ": is a symbolic link; not replacing it");
  const bool replacing = fs::exists(targetStatus);
  if (replacing && !fs::is_directory(targetStatus))
    return errorf(dir, ": exists and is not a directory; not replacing it");
  syncDirectory(temporary);

  if (!replacing) {
    if (::rename(temporary.c_str(), target.c_str()) != 0)
      return errorf(dir, ": cannot rename ", temporary, " into place: ",
                    errnoText());
    syncDirectory(parent.string());
    return Status::ok();
  }

#ifdef RENAME_EXCHANGE
  // Swap the new directory and the old one in one step, so that `dir` always
  // names a complete checkpoint; the temporary name then holds the old one.
  if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, target.c_str(),
                  RENAME_EXCHANGE) == 0) {
    syncDirectory(parent.string());
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    return Status::ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return errorf(dir, ": cannot swap in ", temporary, ": ", errnoText());
#endif
  // Without an atomic exchange (older kernels, some file systems), move the
  // old directory aside first; `dir` is missing only between the renames.
  fs::path old =
      parent / ("." + target.filename().string() + ".old-" + temporarySuffix());
  if (::rename(target.c_str(), old.c_str()) != 0)
    return errorf(dir, ": cannot move the old directory aside: ", errnoText());
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    Status status = errorf(dir, ": cannot rename ", temporary, " into place: ",
                           errnoText());
    (void)::rename(old.c_str(), target.c_str());
    return status;
  }
  syncDirectory(parent.string());
  std::error_code ignored;
  fs::remove_all(old, ignored);
  return Status::ok();
}

void removeStaleTemporaries(const std::string &dir, const std::string &prefix) {
  std::error_code error;
  for (const fs::directory_entry &entry :
       fs::directory_iterator(dir.empty() ? "." : dir, error)) {
    const std::string name = entry.path().filename().string();
    size_t at = std::string::npos;
    for (const char *mark : {".tmp-", ".old-"})
      if (at == std::string::npos)
        at = name.find(mark, prefix.empty() ? 0 : prefix.size() - 1);
    if (name.rfind(prefix, 0) != 0 || name.empty() || name[0] != '.' ||
        at == std::string::npos)
      continue;
    const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
    if (pid <= 0 || pid == long(::getpid()))
      continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH)
      continue; // alive (or not ours to ask about)
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

/// Whether an HF export of mlt writes a file of this name.
static bool isExportFileName(const std::string &name) {
  if (name == kHFConfigFile || name == "model.safetensors" ||
      name == kHFGenerationConfigFile)
    return true;
  for (const char *tokenizer : kHFTokenizerFiles)
    if (name == tokenizer)
      return true;
  return false;
}

Status checkReplaceableCheckpointDir(const std::string &dir) {
  std::error_code error;
  const fs::path target = withoutTrailingSlash(dir);
  if (!fs::is_directory(fs::symlink_status(target, error)))
    return Status::ok(); // missing (or refused by the writer: not a directory)
  for (const fs::directory_entry &entry :
       fs::directory_iterator(target, error)) {
    const std::string name = entry.path().filename().string();
    if (!isExportFileName(name))
      return errorf(dir, ": holds '", name,
                    "', which an HF export of mlt does not write; not "
                    "replacing the directory (write to a new one)");
  }
  if (error)
    return errorf(dir, ": cannot read the directory: ", error.message());
  return Status::ok();
}

Status writeCheckpointDir(const std::string &dir, const std::string &configJson,
                          const TensorMap &tensors,
                          const ExtraFiles &extraFiles) {
  std::vector<const Tensor *> ordered;
  for (const auto &[name, tensor] : tensors)
    ordered.push_back(&tensor);
  return writeCheckpointDir(
      dir, configJson, specsOf(tensors),
      [&](size_t i) -> StatusOr<ByteView> {
        return ByteView{ordered[i]->bytes.data(), ordered[i]->bytes.size()};
      },
      extraFiles);
}

Status writeCheckpointDir(const std::string &dir, const std::string &configJson,
                          const std::vector<TensorSpec> &specs,
                          const TensorBytes &bytesOf,
                          const ExtraFiles &extraFiles) {
  fs::path target = withoutTrailingSlash(dir);
  if (target.empty() || target == "/" || target.filename() == "." ||
      target.filename() == "..")
    return errorf("'", dir, "' cannot be a checkpoint directory");
  // (only the names an export writes: checkReplaceableCheckpointDir lets an
  // export replace a directory of those alone)
  for (const auto &[name, bytes] : extraFiles)
    if (!isExportFileName(name) || name == kHFConfigFile ||
        name == "model.safetensors")
      return errorf(dir, ": '", name, "' is not a file written beside the "
                                      "weights");
  // (in the caller's order of keys)
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(
      configJson, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded())
    return errorf(dir, ": config.json text is not valid JSON");
  if (!config.is_object())
    return errorf(dir, ": config.json text is not a JSON object");
  // The dtype it states (transformers 4's "torch_dtype", 5's "dtype") made
  // the tensors': a bf16 export says so. The text is kept as it is where it
  // states none or the right one.
  std::optional<DType> shared;
  for (const TensorSpec &spec : specs)
    shared = !shared || *shared == spec.dtype ? spec.dtype : DType::Bool;
  const char *stated = shared == DType::F32    ? "float32"
                       : shared == DType::BF16 ? "bfloat16"
                       : shared == DType::F16  ? "float16"
                                               : nullptr;
  bool restated = false;
  for (const char *key : {"torch_dtype", "dtype"})
    if (stated && config.contains(key) && config[key] != stated) {
      config[key] = stated;
      restated = true;
    }
  const std::string configText =
      restated ? config.dump(2) + "\n" : configJson;

  std::error_code ec;
  fs::file_status targetStatus = fs::symlink_status(target, ec);
  if (fs::is_symlink(targetStatus))
    return errorf(dir, ": is a symbolic link; not replacing it");
  if (fs::exists(targetStatus) && !fs::is_directory(targetStatus))
    return errorf(dir, ": exists and is not a directory; not replacing it");
  MLT_RETURN_IF_ERROR(checkReplaceableCheckpointDir(dir));

  fs::path parent = target.parent_path();
  // What a killed write of this directory left behind.
  removeStaleTemporaries(parent.string(), "." + target.filename().string() + ".");
  fs::path temporary =
      parent / ("." + target.filename().string() + ".tmp-" + temporarySuffix());
  if (::mkdir(temporary.c_str(), 0777) != 0)
    return errorf(dir, ": cannot create the temporary directory ",
                  temporary.string(), ": ", errnoText());

  // From here on, every failure removes the temporary directory.
  auto failWith = [&](Status status) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    return status;
  };
  if (Status written =
          writeDurably((temporary / "config.json").string(), configText);
      !written.isOk())
    return failWith(std::move(written));
  Status weights = writeSafeTensors(
      (temporary / "model.safetensors").string(), specs, bytesOf);
  if (!weights.isOk())
    return failWith(std::move(weights).withContext(dir));
  for (const auto &[name, bytes] : extraFiles)
    if (Status written = writeDurably((temporary / name).string(), bytes);
        !written.isOk())
      return failWith(std::move(written));
  if (Status placed = placeDirectory(temporary.string(), dir); !placed.isOk())
    return failWith(std::move(placed));
  return Status::ok();
}

} // namespace mlt::rt
