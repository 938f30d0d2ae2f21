//===- SafeTensorsFuzzer.cpp - libFuzzer target: safetensors files --------===//
//
// Part of mlt. Reads each input as a .safetensors file twice: from memory
// (parseSafeTensors) and as a file (readSafeTensors, through a memfd: the
// pread path of checkpoints), which must agree, error for error and tensor
// for tensor. What loads is converted to floats where it is a float tensor,
// checked against its own names (checkTensors), written with
// writeSafeTensors and read back unchanged. Any crash, hang, leak, undefined
// behaviour or allocation past -malloc_limit_mb is a bug in the reader.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/SafeTensors.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "mlt-fuzz-safetensors: %s\n%s\n", what,
               detail.c_str());
  std::abort();
}

/// A memfd holding `bytes`, named by a /proc path while it is open.
class MemoryFile {
public:
  explicit MemoryFile(std::string_view bytes)
      : fd_(::memfd_create("mlt-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0 ||
        ::write(fd_, bytes.data(), bytes.size()) != ssize_t(bytes.size()))
      fail("cannot write a memfd", "");
  }
  ~MemoryFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
  int fd_;
};

bool sameTensors(const TensorMap &a, const TensorMap &b) {
  if (a.size() != b.size())
    return false;
  for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y)
    if (x->first != y->first || x->second.dtype != y->second.dtype ||
        x->second.shape != y->second.shape ||
        x->second.bytes != y->second.bytes)
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char *>(data), size);
  std::map<std::string, std::string> metadata;
  StatusOr<TensorMap> parsed = parseSafeTensors(bytes, "f", &metadata);

  MemoryFile file(bytes);
  StatusOr<TensorMap> read = readSafeTensors(file.path());
  if (bool(parsed) != bool(read))
    fail("memory and file readers disagree:",
         parsed ? read.status().message() : parsed.status().message());
  if (!parsed) {
    // The same message after the name of the source.
    const std::string &fromMemory = parsed.status().message();
    const std::string &fromFile = read.status().message();
    if (fromMemory.substr(1) != fromFile.substr(file.path().size()))
      fail("memory and file readers fail differently:",
           fromMemory + "\n" + fromFile);
    return 0;
  }
  if (!sameTensors(*parsed, *read))
    fail("memory and file readers read different tensors", "");

  std::vector<ExpectedTensor> expected;
  for (const auto &[name, tensor] : *parsed) {
    expected.push_back({name, tensor.shape});
    if (isFloatDType(tensor.dtype)) {
      StatusOr<std::vector<float>> floats = toFloat32(name, tensor);
      if (!floats)
        fail("a float tensor that loaded does not convert:",
             floats.status().message());
    }
  }
  if (Status status = checkTensors(*parsed, expected); !status)
    fail("a file's tensors do not check against themselves:",
         status.message());

  const std::string path =
      "/dev/shm/mlt-fuzz-safetensors-" + std::to_string(::getpid());
  if (Status written = writeSafeTensors(path, *parsed); !written) {
    // A name the JSON writer cannot encode (not UTF-8) is refused, never
    // written.
    ::unlink(path.c_str());
    return 0;
  }
  StatusOr<TensorMap> again = readSafeTensors(path);
  ::unlink(path.c_str());
  if (!again)
    fail("a written file does not load:", again.status().message());
  if (!sameTensors(*again, *parsed))
    fail("a written file loads different tensors", "");
  return 0;
}
