// libFuzzer target for load_tensor_dict (worker/ddptrain/tensor_file.h):
// ddptrain's --init and --data-file, files written by Python's torch.save.
// The zip archive around them is read by LibTorch's PyTorchStreamReader;
// the pickle program inside is read by our own reader, which also rebuilds
// the tensors. LibTorch is linked as it is (not instrumented); only
// tensor_file.cpp and this harness are.
//
// A zip checks a CRC over every record, so raw mutations of a whole file
// would hardly ever reach the pickle program. The input is therefore mostly
// the parts of an archive that this harness zips up itself:
//   byte 0      mode: 0 = the rest is the whole file as it is (the zip
//               reader's own path); otherwise an archive is built, with a
//               "byteorder" record of "little" unless mode is 1
//   byte 1      n: how many tensor data records follow (n % 5)
//   n times     u16 little-endian length, then that many bytes: record
//               "data/<i>", the key torch.save gives storage i
//   the rest    data.pkl, the pickle program
// tests/fuzz/make_seeds.py writes seeds in this form from torch.save files.
//
// Invariants: a failure is a std::runtime_error naming the file, on one
// line; a loaded dict has unique names and defined CPU tensors, every
// element of which lies inside its storage; and, unless a tensor is too big
// to copy (a view that zero strides make huge), it survives
// save_tensor_dict + load_tensor_dict unchanged.

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>

#include "fuzz_check.h"
#include "tensor_file.h"

// LibTorch's zip reader leaks its miniz state when it refuses an archive
// (its constructor throws before a destructor can free it): not ours to fix,
// and not to be reported for every malformed archive. Debian's LibTorch has
// no symbols, so the suppression names the library; what our code allocates
// is not allocated from inside it.
extern "C" const char* __lsan_default_suppressions() { return "leak:libtorch_cpu.so\n"; }

namespace {

using ddp::train::TensorDict;

// One directory per process, on a RAM file system where there is one,
// removed when the process exits (a crash leaves it, with the input).
const std::string& work_dir() {
  static const std::string dir = [] {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    std::string tmpl = std::string(base) + "/tensor_file_fuzz.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return tmpl;
  }();
  static const bool cleaned_at_exit = std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(work_dir(), ignored);
  }) == 0;
  (void)cleaned_at_exit;
  return dir;
}

void write_file(const std::string& path, const char* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  FUZZ_CHECK(std::fclose(f) == 0);
}

// The archive this input describes (see the top of the file).
std::vector<char> build_archive(const uint8_t* data, size_t size) {
  size_t pos = 1;
  const size_t records = pos < size ? data[pos++] % 5 : 0;
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&archive](const void* p, size_t n) -> size_t {
    archive.insert(archive.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    return n;
  });
  for (size_t i = 0; i < records; ++i) {
    size_t len = 0;
    if (size - pos >= 2) {
      len = data[pos] | (size_t{data[pos + 1]} << 8);
      pos += 2;
    }
    len = std::min(len, size - pos);
    writer.writeRecord("data/" + std::to_string(i), data + pos, len);
    pos += len;
  }
  if (data[0] != 1) writer.writeRecord("byteorder", "little", 6);
  writer.writeRecord("data.pkl", data + pos, size - pos);
  writer.writeEndOfFile();
  return archive;
}

bool one_line_naming(const std::string& message, const std::string& path) {
  return message.rfind(path + ": ", 0) == 0 && message.find('\n') == std::string::npos;
}

// Every element the tensor can address lies inside its storage: computed
// here with overflow checks, and the last byte read through an instrumented
// load, so that a tensor pointing past its allocation is a crash.
void check_inside_storage(const torch::Tensor& t) {
  if (t.numel() == 0) return;
  const int64_t item = static_cast<int64_t>(t.element_size());
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    FUZZ_CHECK(t.size(d) > 0 && t.stride(d) >= 0);
    int64_t step = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &step));
    FUZZ_CHECK(!__builtin_add_overflow(last, step, &last));
  }
  int64_t end_bytes = 0;
  FUZZ_CHECK(!__builtin_mul_overflow(last + 1, item, &end_bytes));
  FUZZ_CHECK(static_cast<uint64_t>(end_bytes) <= t.storage().nbytes());
  const auto* base = static_cast<const volatile unsigned char*>(t.storage().data());
  (void)base[end_bytes - 1];
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor x = a.contiguous(), y = b.contiguous();
  return x.numel() == 0 || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = work_dir() + "/in.pt";
  if (data[0] == 0) {
    write_file(path, reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    const std::vector<char> archive = build_archive(data, size);
    write_file(path, archive.data(), archive.size());
  }

  TensorDict dict;
  try {
    dict = ddp::train::load_tensor_dict(path);
  } catch (const std::runtime_error& e) {
    if (!one_line_naming(e.what(), path)) {
      std::fprintf(stderr, "message: %s\n", e.what());
      FUZZ_CHECK(one_line_naming(e.what(), path));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a std::runtime_error: %s\n", e.what());
    FUZZ_CHECK(!"load_tensor_dict throws std::runtime_error only");
  }

  std::set<std::string> names;
  for (const auto& [name, tensor] : dict) {
    FUZZ_CHECK(names.insert(name).second);
    FUZZ_CHECK(tensor.defined() && tensor.device().is_cpu());
    check_inside_storage(tensor);
  }
  // Saving makes a contiguous copy of each tensor: not of a view that zero
  // strides make huge (as expand() does), which a file may hold.
  constexpr int64_t kCopyable = int64_t{1} << 24;
  if (std::any_of(dict.begin(), dict.end(), [](const auto& entry) { return entry.second.numel() > kCopyable; })) {
    return 0;
  }
  const std::string again_path = work_dir() + "/again.pt";
  ddp::train::save_tensor_dict(again_path, dict);
  const TensorDict again = ddp::train::load_tensor_dict(again_path);
  FUZZ_CHECK(again.size() == dict.size());
  for (size_t i = 0; i < dict.size(); ++i) {
    FUZZ_CHECK(again[i].first == dict[i].first);
    FUZZ_CHECK(same_bytes(again[i].second, dict[i].second));
  }
  return 0;
}
