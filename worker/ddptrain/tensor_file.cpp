#include "tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <ATen/core/Dict.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

namespace ddp::train {
namespace {

std::runtime_error file_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

// One line: LibTorch messages carry a C++ backtrace after the first line.
std::string first_line(const std::string& text) {
  auto end = text.find('\n');
  std::string line = text.substr(0, end);
  return line.empty() ? "unknown error" : line;
}

// Text from the file (a key, a class name) as it goes into a one-line
// message: control characters escaped, and cut short, since a key may be
// as long as the file.
std::string shown(const std::string& text) {
  constexpr size_t kMax = 120;
  size_t end = std::min(text.size(), kMax);
  while (end < text.size() && end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;  // whole UTF-8
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return end < text.size() ? out + "..." : out;
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw file_error(path, std::string("cannot write: ") + std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void atomic_write(const std::string& path, const std::vector<char>& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> tmpl(tmp.begin(), tmp.end());
  tmpl.push_back('\0');
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw file_error(path, std::string("cannot create a temporary file: ") + std::strerror(errno));
  tmp = tmpl.data();
  try {
    ::fchmod(fd, 0644);
    write_all(fd, bytes.data(), bytes.size(), path);
    if (::fsync(fd) != 0) throw file_error(path, std::string("cannot fsync: ") + std::strerror(errno));
    if (::close(fd) != 0) {
      fd = -1;
      throw file_error(path, std::string("cannot close: ") + std::strerror(errno));
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      throw file_error(path, std::string("cannot rename the temporary file into place: ") + std::strerror(errno));
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable.
  int dir = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}


// ------------------------------------------------------------------------
// A small reader for the pickle programs torch.save writes (protocol 2) and
// torch::pickle_save writes. LibTorch's own pickle_load turns the
// collections.OrderedDict of a state_dict into None, so it cannot read
// torch.save(model.state_dict()); this reader can. Tensors come back on the
// CPU whatever their saved location (like map_location="cpu").

enum class PKind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Tensor, Storage };

const char* kind_name(PKind kind) {
  switch (kind) {
    case PKind::None: return "None";
    case PKind::Bool: return "bool";
    case PKind::Int: return "int";
    case PKind::Float: return "float";
    case PKind::Str: return "str";
    case PKind::Tuple: return "tuple";
    case PKind::List: return "list";
    case PKind::Dict: return "dict";
    case PKind::Global: return "class or function";
    case PKind::Tensor: return "tensor";
    case PKind::Storage: return "storage";
  }
  return "object";
}

struct PObj;
using PPtr = std::shared_ptr<PObj>;
struct PObj {
  explicit PObj(PKind k) : kind(k) {}
  PKind kind;
  int64_t i = 0;  // Int, Bool
  double f = 0;
  std::string s;  // Str; Global: "module.name"
  std::vector<PPtr> items;                     // Tuple, List
  std::vector<std::pair<PPtr, PPtr>> dict;     // Dict (insertion order)
  std::unordered_map<std::string, size_t> str_key_at;  // Dict: where each string key is in `dict`
  torch::Tensor tensor;                        // Tensor; Storage: 1-D
};

class PickleReader {
 public:
  PickleReader(const PickleReader&) = delete;
  PickleReader& operator=(const PickleReader&) = delete;

  // Objects may hold each other in cycles (a list appended to itself) and
  // nest a million deep ("((((...tttt"): left to their shared_ptrs, the
  // first would leak and the second would overflow the stack while freeing.
  // Cutting every link first frees each object on its own.
  ~PickleReader() {
    for (const PPtr& p : made_) {
      p->items.clear();
      p->dict.clear();
    }
  }

  PickleReader(std::string path, caffe2::serialize::PyTorchStreamReader& zip) : path_(std::move(path)), zip_(zip) {
    if (zip_.hasRecord("byteorder")) {
      const std::string order = read_record("byteorder");
      if (order != "little") throw error("saved with byte order '" + shown(order) + "', only little-endian is supported");
    }
    if (!zip_.hasRecord("data.pkl")) throw error("no data.pkl record (not a torch.save file)");
    bytes_ = read_record("data.pkl");
  }

  PPtr run() {
    try {
      return run_inner();
    } catch (const std::runtime_error&) {
      throw;
    } catch (const std::exception& e) {
      throw error(first_line(e.what()));
    }
  }

 private:
  std::runtime_error error(const std::string& what) const { return file_error(path_, what); }

  // A record's bytes. A damaged one (e.g. its local header) fails inside
  // LibTorch with a c10::Error: several lines, without the file's name.
  std::string read_record(const std::string& name) const {
    try {
      auto [data, size] = zip_.getRecord(name);
      return std::string(static_cast<const char*>(data.get()), size);
    } catch (const std::exception& e) {
      throw error("not a readable torch.save archive: " + first_line(e.what()));
    }
  }

  PPtr make(PKind kind) {
    made_.push_back(std::make_shared<PObj>(kind));
    return made_.back();
  }

  const char* take(size_t n) {
    if (n > bytes_.size() - pos_) throw error("truncated pickle data");
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t uint_le(size_t n) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(n));
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(p[k]) << (8 * k);
    return v;
  }
  std::string line() {
    size_t end = pos_;
    while (end < bytes_.size() && bytes_[end] != '\n') ++end;
    if (end >= bytes_.size()) throw error("truncated pickle data");
    std::string out(bytes_.data() + pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  PPtr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) throw error("malformed pickle (stack underflow)");
    PPtr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<PPtr> pop_mark() {
    if (marks_.empty()) throw error("malformed pickle (no mark)");
    size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PPtr> out(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  PPtr& top() {
    if (stack_.empty()) throw error("malformed pickle (empty stack)");
    return stack_.back();
  }
  PPtr str(std::string s) {
    auto p = make(PKind::Str);
    p->s = std::move(s);
    return p;
  }
  PPtr integer(int64_t v, PKind kind = PKind::Int) {
    auto p = make(kind);
    p->i = v;
    return p;
  }
  PPtr& memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) throw error("malformed pickle (memo " + std::to_string(index) + " missing)");
    return it->second;
  }
  void add_items(PPtr& target, std::vector<PPtr> values) {
    if (target->kind != PKind::Dict) throw error(std::string("malformed pickle (setitems on ") + kind_name(target->kind) + ")");
    if (values.size() % 2 != 0) throw error("malformed pickle (odd setitems)");
    // A string key seen before replaces its value (Python's dict); looked up
    // by hash, so a state_dict of n keys loads in O(n), not O(n^2).
    for (size_t k = 0; k < values.size(); k += 2) {
      if (values[k]->kind == PKind::Str) {
        const auto [at, fresh] = target->str_key_at.try_emplace(values[k]->s, target->dict.size());
        if (!fresh) {
          target->dict[at->second].second = values[k + 1];
          continue;
        }
      }
      target->dict.emplace_back(values[k], values[k + 1]);
    }
  }

  static std::vector<int64_t> int_tuple(const PPtr& p, const char* what, const PickleReader& self) {
    if (p->kind != PKind::Tuple && p->kind != PKind::List) throw self.error(std::string("bad tensor ") + what);
    std::vector<int64_t> out;
    for (const auto& item : p->items) {
      if (item->kind != PKind::Int) throw self.error(std::string("bad tensor ") + what);
      out.push_back(item->i);
    }
    return out;
  }

  PPtr load_storage(const PPtr& pid) {
    // ('storage', torch.FloatStorage, key, location, numel)
    if (pid->kind != PKind::Tuple || pid->items.size() < 5 || pid->items[0]->kind != PKind::Str ||
        pid->items[0]->s != "storage" || pid->items[1]->kind != PKind::Global || pid->items[2]->kind != PKind::Str ||
        pid->items[4]->kind != PKind::Int) {
      throw error("unsupported persistent object (expected a tensor storage)");
    }
    const std::string& key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    const std::string& type = pid->items[1]->s;
    static const std::map<std::string, c10::ScalarType> kTypes = {
        {"torch.FloatStorage", c10::kFloat},       {"torch.DoubleStorage", c10::kDouble},
        {"torch.HalfStorage", c10::kHalf},         {"torch.BFloat16Storage", c10::kBFloat16},
        {"torch.LongStorage", c10::kLong},         {"torch.IntStorage", c10::kInt},
        {"torch.ShortStorage", c10::kShort},       {"torch.CharStorage", c10::kChar},
        {"torch.ByteStorage", c10::kByte},         {"torch.BoolStorage", c10::kBool},
        {"torch.ComplexFloatStorage", c10::kComplexFloat}, {"torch.ComplexDoubleStorage", c10::kComplexDouble},
        {"torch.UntypedStorage", c10::kByte}};
    auto dtype = kTypes.find(type);
    if (dtype == kTypes.end()) throw error("unsupported storage type " + shown(type));
    const int64_t numel = pid->items[4]->i;
    if (numel < 0) throw error("bad tensor storage (negative size)");
    const std::string record = "data/" + key;
    if (!zip_.hasRecord(record)) throw error("missing tensor data record " + shown(record));
    auto [data, size] = zip_.getRecord(record);
    // Checked before allocating: the element count is the file's word, the
    // record's size is what is really there.
    size_t need = 0;
    if (__builtin_mul_overflow(static_cast<size_t>(numel), c10::elementSize(dtype->second), &need) || size < need) {
      throw error("tensor data record " + shown(record) + " is truncated");
    }
    auto storage = torch::empty({numel}, torch::TensorOptions().dtype(dtype->second));
    if (need > 0) std::memcpy(storage.data_ptr(), data.get(), need);
    auto p = make(PKind::Storage);
    p->tensor = storage;
    storages_.emplace(key, p);
    return p;
  }

  PPtr reduce(const PPtr& callable, const PPtr& args) {
    if (callable->kind != PKind::Global) throw error("unsupported pickle: call of a non-class");
    if (args->kind != PKind::Tuple) throw error("unsupported pickle: call arguments are not a tuple");
    const std::string& name = callable->s;
    const auto& a = args->items;
    if (name == "collections.OrderedDict" || name == "builtins.dict" || name == "__builtin__.dict") {
      return make(PKind::Dict);
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      if (a.size() < 4 || a[0]->kind != PKind::Storage || a[1]->kind != PKind::Int) throw error("bad tensor record");
      auto sizes = int_tuple(a[2], "size", *this);
      auto strides = int_tuple(a[3], "stride", *this);
      if (sizes.size() != strides.size()) throw error("bad tensor record (size/stride rank differ)");
      const auto& storage = a[0]->tensor;
      if (a[1]->i < 0) throw error("bad tensor record (outside its storage)");
      bool empty = false;
      for (size_t d = 0; d < sizes.size(); ++d) {
        if (sizes[d] < 0 || strides[d] < 0) throw error("bad tensor record (negative size or stride)");
        if (sizes[d] == 0) empty = true;
      }
      // The last element's index, offset + sum((size - 1) * stride): sizes
      // and strides are the file's, so the sum may not fit in 64 bits.
      int64_t extent = a[1]->i;
      for (size_t d = 0; d < sizes.size() && !empty; ++d) {
        int64_t span = 0;
        if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) || __builtin_add_overflow(extent, span, &extent)) {
          throw error("bad tensor record (outside its storage)");
        }
      }
      if (!empty && extent >= storage.numel()) throw error("bad tensor record (outside its storage)");
      // Zero strides make a view of any size over a small storage (as
      // expand() does), but its element count must still fit in 64 bits.
      int64_t numel = 1;
      for (size_t d = 0; d < sizes.size() && !empty; ++d) {
        if (__builtin_mul_overflow(numel, sizes[d], &numel)) throw error("bad tensor record (too many elements)");
      }
      auto p = make(PKind::Tensor);
      p->tensor = empty ? torch::empty(sizes, storage.options()) : storage.as_strided(sizes, strides, a[1]->i);
      return p;
    }
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != PKind::Tensor) throw error("bad parameter record");
      return a[0];
    }
    if (name == "torch.jit._pickle.restore_type_tag") {
      if (a.empty()) throw error("bad restore_type_tag");
      return a[0];
    }
    throw error("unsupported object in pickle: " + shown(name));
  }

  PPtr run_inner() {
    for (;;) {
      const auto op = static_cast<unsigned char>(*take(1));
      switch (op) {
        case 0x80: take(1); break;   // PROTO
        case 0x95: take(8); break;   // FRAME
        case '.': {                  // STOP
          if (stack_.size() != 1 || !marks_.empty()) throw error("malformed pickle (stack at stop)");
          return stack_.back();
        }
        case 'c': {  // GLOBAL
          std::string module = line();
          std::string cls = line();
          auto p = make(PKind::Global);
          p->s = module + "." + cls;
          stack_.push_back(p);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          PPtr cls = pop(), module = pop();
          if (cls->kind != PKind::Str || module->kind != PKind::Str) throw error("malformed pickle (stack_global)");
          auto p = make(PKind::Global);
          p->s = module->s + "." + cls->s;
          stack_.push_back(p);
          break;
        }
        case '(': marks_.push_back(stack_.size()); break;
        case ')': stack_.push_back(make(PKind::Tuple)); break;
        case ']': stack_.push_back(make(PKind::List)); break;
        case '}': stack_.push_back(make(PKind::Dict)); break;
        case 't': case 'l': {
          auto p = make(op == 't' ? PKind::Tuple : PKind::List);
          p->items = pop_mark();
          stack_.push_back(p);
          break;
        }
        case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          auto p = make(PKind::Tuple);
          p->items.resize(n);
          for (size_t k = n; k-- > 0;) p->items[k] = pop();
          stack_.push_back(p);
          break;
        }
        case 'd': {
          auto p = make(PKind::Dict);
          add_items(p, pop_mark());
          stack_.push_back(p);
          break;
        }
        case 'a': {
          PPtr v = pop();
          if (top()->kind != PKind::List) throw error("malformed pickle (append)");
          top()->items.push_back(v);
          break;
        }
        case 'e': {
          auto values = pop_mark();
          if (top()->kind != PKind::List) throw error("malformed pickle (appends)");
          for (auto& v : values) top()->items.push_back(v);
          break;
        }
        case 's': {
          PPtr v = pop(), k = pop();
          add_items(top(), {k, v});
          break;
        }
        case 'u': {
          auto values = pop_mark();
          add_items(top(), std::move(values));
          break;
        }
        case 'N': stack_.push_back(make(PKind::None)); break;
        case 0x88: stack_.push_back(integer(1, PKind::Bool)); break;
        case 0x89: stack_.push_back(integer(0, PKind::Bool)); break;
        case 'J': stack_.push_back(integer(static_cast<int32_t>(uint_le(4)))); break;
        case 'K': stack_.push_back(integer(static_cast<int64_t>(uint_le(1)))); break;
        case 'M': stack_.push_back(integer(static_cast<int64_t>(uint_le(2)))); break;
        case 0x8a: {  // LONG1
          const size_t n = static_cast<size_t>(uint_le(1));
          if (n > 8) throw error("integer too large in pickle");
          uint64_t v = n ? uint_le(n) : 0;
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1u) v |= ~uint64_t{0} << (8 * n);  // sign-extend
          stack_.push_back(integer(static_cast<int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          const auto* p = reinterpret_cast<const unsigned char*>(take(8));
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | p[k];
          auto v = make(PKind::Float);
          std::memcpy(&v->f, &bits, sizeof bits);
          stack_.push_back(v);
          break;
        }
        case 'X': case 'B': case 'T': {  // BINUNICODE, BINBYTES, BINSTRING (u32 length)
          const size_t n = static_cast<size_t>(uint_le(4));
          stack_.push_back(str(std::string(take(n), n)));
          break;
        }
        case 0x8c: case 'C': case 'U': {  // SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING
          const size_t n = static_cast<size_t>(uint_le(1));
          stack_.push_back(str(std::string(take(n), n)));
          break;
        }
        case 0x8d: case 0x8e: {  // BINUNICODE8, BINBYTES8
          const size_t n = static_cast<size_t>(uint_le(8));
          stack_.push_back(str(std::string(take(n), n)));
          break;
        }
        case 'q': memo_[uint_le(1)] = top(); break;
        case 'r': memo_[uint_le(4)] = top(); break;
        case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
        case 'h': stack_.push_back(memo_get(uint_le(1))); break;
        case 'j': stack_.push_back(memo_get(uint_le(4))); break;
        case 'Q': stack_.push_back(load_storage(pop())); break;  // BINPERSID
        case 'R': {
          PPtr args = pop(), callable = pop();
          stack_.push_back(reduce(callable, args));
          break;
        }
        case 'b': pop(); top(); break;  // BUILD: attribute state (e.g. a state_dict's _metadata) is not needed
        case '0': pop(); break;         // POP
        case '2': stack_.push_back(top()); break;  // DUP
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          throw error(std::string("unsupported pickle opcode ") + hex + " at byte " + std::to_string(pos_ - 1));
        }
      }
    }
  }

  std::string path_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  std::string bytes_;
  size_t pos_ = 0;
  std::vector<PPtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PPtr> memo_;
  std::map<std::string, PPtr> storages_;
  std::vector<PPtr> made_;  // every object made, so that ~PickleReader frees them flat
};

std::string storage_type_name(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return "FloatStorage";
    case c10::kDouble: return "DoubleStorage";
    case c10::kHalf: return "HalfStorage";
    case c10::kBFloat16: return "BFloat16Storage";
    case c10::kLong: return "LongStorage";
    case c10::kInt: return "IntStorage";
    case c10::kShort: return "ShortStorage";
    case c10::kChar: return "CharStorage";
    case c10::kByte: return "ByteStorage";
    case c10::kBool: return "BoolStorage";
    case c10::kComplexFloat: return "ComplexFloatStorage";
    case c10::kComplexDouble: return "ComplexDoubleStorage";
    default: return {};
  }
}

}  // namespace

c10::IValue load_pickled_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw file_error(path, "read error");
  if (bytes.empty()) throw file_error(path, "empty file (not a torch.save file)");
  // torch.save's default format is a zip archive ("PK\x03\x04").
  if (bytes.size() < 4 || bytes[0] != 'P' || bytes[1] != 'K') {
    throw file_error(path, "not a torch.save zip file (legacy _use_new_zipfile_serialization=False files are not supported)");
  }
  try {
    return torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw file_error(path, "cannot unpickle: " + first_line(e.what()));
  }
}

void save_pickled_file(const std::string& path, const c10::IValue& value) {
  std::vector<char> bytes;
  try {
    bytes = torch::pickle_save(value);
  } catch (const std::exception& e) {
    throw file_error(path, "cannot pickle: " + first_line(e.what()));
  }
  atomic_write(path, bytes);
}

TensorDict load_tensor_dict(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
    char magic[2] = {0, 0};
    probe.read(magic, 2);
    if (probe.gcount() < 2 || magic[0] != 'P' || magic[1] != 'K') {
      throw file_error(path,
                       "not a torch.save zip file (legacy _use_new_zipfile_serialization=False files are not supported)");
    }
  }
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& e) {
    throw file_error(path, "not a readable torch.save archive: " + first_line(e.what()));
  }
  PickleReader pickle(path, *reader);
  PPtr root = pickle.run();
  if (root->kind != PKind::Dict) {
    throw file_error(path, std::string("expected a dict of name -> tensor, found ") + kind_name(root->kind));
  }
  TensorDict out;
  for (const auto& [key, value] : root->dict) {
    if (key->kind != PKind::Str) {
      throw file_error(path, std::string("dict key is not a string (") + kind_name(key->kind) + ")");
    }
    if (value->kind != PKind::Tensor) {
      throw file_error(path, "entry '" + shown(key->s) + "' is not a tensor (" + kind_name(value->kind) + ")");
    }
    out.emplace_back(key->s, value->tensor);
  }
  return out;
}

void save_tensor_dict(const std::string& path, const TensorDict& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (!seen.insert(name).second) throw std::invalid_argument(path + ": duplicate tensor name '" + name + "'");
    if (!tensor.defined()) throw std::invalid_argument(path + ": tensor '" + name + "' is undefined");
  }
  // The pickle program Python's torch.save writes for a plain dict (protocol
  // 2), using only globals that torch.load(weights_only=True) accepts:
  // torch._utils._rebuild_tensor_v2, torch.<Type>Storage, collections.OrderedDict.
  std::string pkl = "\x80\x02}";
  auto op = [&](char c) { pkl.push_back(c); };
  auto unicode = [&](const std::string& text) {
    op('X');
    const auto n = static_cast<uint32_t>(text.size());
    for (int k = 0; k < 4; ++k) pkl.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
    pkl += text;
  };
  auto integer = [&](int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      const auto u = static_cast<uint32_t>(static_cast<int32_t>(v));
      for (int k = 0; k < 4; ++k) pkl.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
    } else {
      pkl += "\x8a\x08";
      const auto u = static_cast<uint64_t>(v);
      for (int k = 0; k < 8; ++k) pkl.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
    }
  };
  auto int_tuple = [&](c10::IntArrayRef values) {
    if (values.empty()) return op(')');
    op('(');
    for (auto v : values) integer(v);
    op('t');
  };
  std::vector<char> archive;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&archive](const void* data, size_t size) -> size_t {
      archive.insert(archive.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
      return size;
    });
    if (!tensors.empty()) op('(');
    size_t key = 0;
    for (const auto& [name, tensor] : tensors) {
      auto t = tensor.detach().to(torch::kCPU).contiguous();
      const std::string storage_type = storage_type_name(t.scalar_type());
      if (storage_type.empty()) {
        throw std::invalid_argument(path + ": tensor '" + name + "' has unsupported dtype " +
                                    c10::toString(t.scalar_type()));
      }
      const std::string record = std::to_string(key++);
      unicode(name);
      pkl += "ctorch._utils\n_rebuild_tensor_v2\n(";
      pkl += "(";
      unicode("storage");
      pkl += "ctorch\n" + storage_type + "\n";
      unicode(record);
      unicode("cpu");
      integer(t.numel());
      pkl += "tQ";
      integer(0);
      int_tuple(t.sizes());
      int_tuple(t.strides());
      pkl += "\x89" "ccollections\nOrderedDict\n)RtR";
      writer.writeRecord("data/" + record, t.data_ptr(), t.numel() * t.element_size());
    }
    if (!tensors.empty()) op('u');
    op('.');
    writer.writeRecord("byteorder", "little", 6);
    writer.writeRecord("data.pkl", pkl.data(), pkl.size());
    writer.writeEndOfFile();
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw file_error(path, "cannot serialize: " + first_line(e.what()));
  }
  atomic_write(path, archive);
}

}  // namespace ddp::train
