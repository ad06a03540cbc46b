// Tensor files: C++ round trip, atomic writes, and both directions with
// Python's torch.save / torch.load.
#include "tensor_file.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "models.h"
#include "test_util.h"

namespace ddp::train {
namespace {

using testing::TempDir;

TensorDict sample_dict() {
  auto base = torch::arange(24, torch::kFloat).view({4, 6});
  return {
      {"fc0.weight", torch::randn({3, 4})},
      {"fc0.bias", torch::arange(3, torch::kDouble) * 0.5},
      {"steps", torch::tensor({7, -8, 9}, torch::kLong)},
      {"transposed", base.t()},                  // non-contiguous
      {"slice", base.slice(0, 2, 4)},            // storage offset into a shared storage
      {"scalar", torch::tensor(3.5)},            // 0-d
      {"empty", torch::empty({0, 5})},
      {"half", torch::tensor({1.5, -2.0}).to(torch::kHalf)},
      {"flags", torch::tensor({true, false})},
  };
}

void expect_same(const TensorDict& got, const TensorDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);  // order kept
    EXPECT_EQ(got[i].second.scalar_type(), want[i].second.scalar_type()) << want[i].first;
    EXPECT_EQ(got[i].second.sizes(), want[i].second.sizes()) << want[i].first;
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << want[i].first;
  }
}

TEST(TensorFile, CppRoundTrip) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  torch::manual_seed(0);
  auto dict = sample_dict();
  save_tensor_dict(dir.file("a.pt"), dict);
  expect_same(load_tensor_dict(dir.file("a.pt")), dict);
  // Overwrite in place; no temporary files left behind.
  TensorDict other{{"only", torch::ones({2})}};
  save_tensor_dict(dir.file("a.pt"), other);
  expect_same(load_tensor_dict(dir.file("a.pt")), other);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "a.pt");
  }
  EXPECT_EQ(files, 1);
}

TEST(TensorFile, ModelStateRoundTrip) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  torch::manual_seed(1);
  auto model = make_model(ModelConfig{});
  TensorDict state;
  for (const auto& item : model->named_parameters()) state.emplace_back(item.key(), item.value());
  save_tensor_dict(dir.file("m.pt"), state);
  auto loaded = load_tensor_dict(dir.file("m.pt"));
  expect_same(loaded, state);
  EXPECT_FALSE(loaded[0].second.requires_grad());
}

TEST(TensorFile, Errors) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  auto expect_error = [](auto fn, const std::string& path, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << path;
    } catch (const std::runtime_error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  const std::string missing = dir.file("missing.pt");
  expect_error([&] { load_tensor_dict(missing); }, missing, "cannot open");
  const std::string garbage = dir.file("garbage.pt");
  {
    std::ofstream f(garbage);
    f << "not a zip";
  }
  expect_error([&] { load_tensor_dict(garbage); }, garbage, "not a torch.save");
  const std::string broken = dir.file("broken.pt");
  {
    std::ofstream f(broken);
    f << "PK\x03\x04 but then nothing useful";
  }
  expect_error([&] { load_tensor_dict(broken); }, broken, "torch.save");
  const std::string no_dir = dir.file("no/such/dir/x.pt");
  expect_error([&] { save_tensor_dict(no_dir, {{"a", torch::ones({1})}}); }, no_dir, "cannot create");
  EXPECT_THROW(save_tensor_dict(dir.file("dup.pt"), {{"a", torch::ones({1})}, {"a", torch::ones({1})}}),
               std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("dup.pt")));
}

// --- hostile files (found by tests/fuzz/tensor_file_fuzz) -----------------

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    load_tensor_dict(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A torch.save archive holding `pkl` as data.pkl and `records` as data/0, data/1, ...
void write_archive(const std::string& path, const std::string& pkl, const std::vector<std::string>& records = {}) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (size_t i = 0; i < records.size(); ++i) {
    writer.writeRecord("data/" + std::to_string(i), records[i].data(), records[i].size());
  }
  writer.writeRecord("data.pkl", pkl.data(), pkl.size());
  writer.writeEndOfFile();
}

std::string pickle_str(const std::string& text) {
  std::string out = "X";
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((text.size() >> (8 * k)) & 0xff));
  return out + text;
}

std::string pickle_int(int64_t v) {
  std::string out = "\x8a\x08";
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
  return out;
}

// {"w": float tensor} as torch.save writes it, with the storage's element
// count, the sizes and the strides as given (offset 0, storage data/0).
std::string one_tensor_pickle(int64_t numel, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  std::string p = "\x80\x02}(" + pickle_str("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + pickle_str("storage") +
                  "ctorch\nFloatStorage\n" + pickle_str("0") + pickle_str("cpu") + pickle_int(numel) + "tQ" +
                  pickle_int(0) + "(";
  for (int64_t s : sizes) p += pickle_int(s);
  p += "t(";
  for (int64_t s : strides) p += pickle_int(s);
  return p + "t\x89" "ccollections\nOrderedDict\n)RtRu.";
}

TEST(TensorFileHostile, ADamagedRecordIsAnErrorNamingTheFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("damaged.pt");
  save_tensor_dict(path, {{"a", torch::ones({2})}});
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The signature of data.pkl's local header: LibTorch's reader fails on it
  // with a c10::Error (several lines, a C++ backtrace, no file name).
  const size_t name = bytes.find("data.pkl");
  ASSERT_NE(name, std::string::npos);
  const size_t header = bytes.rfind("PK\x03\x04", name);
  ASSERT_NE(header, std::string::npos);
  bytes[header + 3] = '\xff';
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  expect_load_error(path, "not a readable torch.save archive");
}

TEST(TensorFileHostile, AStorageLargerThanItsRecordIsRefusedBeforeAnythingIsAllocated) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("huge.pt");
  // 2^40 floats (4 TiB) said to be in a 16-byte record.
  write_archive(path, one_tensor_pickle(int64_t{1} << 40, {1}, {1}), {std::string(16, '\0')});
  expect_load_error(path, "tensor data record data/0 is truncated");
}

TEST(TensorFileHostile, SizesAndStridesThatOverflow64BitsAreRefused) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("overflow.pt");
  // (2^62 - 1) * 4 + 1 wraps around 64 bits to a small number: inside the storage.
  write_archive(path, one_tensor_pickle(4, {int64_t{1} << 62, 2}, {4, 1}), {std::string(16, '\0')});
  expect_load_error(path, "outside its storage");
  // Zero strides keep any view inside its storage; its element count must still fit.
  const std::string count = dir.file("count.pt");
  write_archive(count, one_tensor_pickle(4, {int64_t{1} << 62, 4}, {0, 0}), {std::string(16, '\0')});
  expect_load_error(count, "too many elements");
  // One that fits is a valid view (torch.save of an expanded tensor).
  const std::string expanded = dir.file("expanded.pt");
  write_archive(expanded, one_tensor_pickle(4, {1000, 4}, {0, 1}), {std::string(16, '\0')});
  const TensorDict loaded = load_tensor_dict(expanded);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].second.sizes(), (std::vector<int64_t>{1000, 4}));
}

TEST(TensorFileHostile, ARepeatedKeyReplacesItsValueAsInAPythonDict) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("repeated.pt");
  // {"w": 1, "w": tensor}: one entry, the tensor (the later value wins).
  std::string pkl = one_tensor_pickle(4, {4}, {1});
  pkl.insert(4, pickle_str("w") + "K\x01");
  write_archive(path, pkl, {std::string(16, '\0')});
  const TensorDict loaded = load_tensor_dict(path);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].first, "w");
  EXPECT_EQ(loaded[0].second.sizes(), (std::vector<int64_t>{4}));
}

TEST(TensorFileHostile, DeepAndSelfReferencingPicklesAreRefusedWithoutCrashingOrLeaking) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  // A million nested tuples: freed link by link, that overflowed the stack.
  const std::string deep = dir.file("deep.pt");
  constexpr size_t kDepth = 1'000'000;
  write_archive(deep, "\x80\x02" + std::string(kDepth, '(') + std::string(kDepth, 't') + ".");
  expect_load_error(deep, "expected a dict of name -> tensor, found tuple");
  // A list appended to itself (leaked before; the sanitizer build's leak check sees it).
  const std::string cycle = dir.file("cycle.pt");
  write_archive(cycle, "\x80\x02]2a.");
  expect_load_error(cycle, "found list");
}

TEST(TensorFileHostile, TextFromTheFileInAnErrorStaysOnOneLine) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  // {"a\nb": 1}: the key goes into the message, escaped.
  const std::string newline = dir.file("newline.pt");
  write_archive(newline, "\x80\x02}(" + pickle_str("a\nb") + "K\x01u.");
  expect_load_error(newline, "entry 'a\\x0ab' is not a tensor (int)");
  // A key as long as the file is cut short.
  const std::string long_key = dir.file("long_key.pt");
  write_archive(long_key, "\x80\x02}(" + pickle_str(std::string(100000, 'k')) + "K\x01u.");
  expect_load_error(long_key, "entry '" + std::string(120, 'k') + "...' is not a tensor");
}

// --- with Python ---------------------------------------------------------

class PythonTensorFile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
    ASSERT_TRUE(dir_.ok());
  }
  TempDir dir_;
};

TEST_F(PythonTensorFile, CppReadsAPythonStateDict) {
  std::string log;
  const int rc = testing::run_python(dir_, R"PY(
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = torch.nn.Linear(32, 64)
        self.fc1 = torch.nn.Linear(64, 64)
        self.fc2 = torch.nn.Linear(64, 10)
net = Net()
with torch.no_grad():
    for i, p in enumerate(net.parameters()):
        p.copy_(torch.arange(p.numel(), dtype=torch.float32).view(p.shape) * 0.001 + i)
sd = net.state_dict()   # an OrderedDict with _metadata
assert hasattr(sd, "_metadata")
torch.save(sd, "state.pt")
extra = {"d": torch.arange(6, dtype=torch.float64).view(2, 3).t(), "i": torch.tensor([1, -2, 3]),
         "view": torch.arange(10.)[3:7], "b": torch.tensor([True, False]), "p": torch.nn.Parameter(torch.ones(2))}
torch.save(extra, "extra.pt")
torch.save([torch.ones(1)], "list.pt")
torch.save({"a": torch.ones(1), "n": 3}, "not_tensor.pt")
)PY",
                                     &log);
  ASSERT_EQ(rc, 0) << log;

  auto state = load_tensor_dict(dir_.file("state.pt"));
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});  // fc0..fc2 like the Python Net
  auto params = model->named_parameters();
  ASSERT_EQ(state.size(), params.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i].first, params[i].key());
    EXPECT_EQ(state[i].second.sizes(), params[i].value().sizes());
    auto want = torch::arange(state[i].second.numel(), torch::kFloat).view(state[i].second.sizes()) * 0.001 +
                static_cast<double>(i);
    EXPECT_TRUE(torch::allclose(state[i].second, want, 0, 0)) << state[i].first;
  }

  auto extra = load_tensor_dict(dir_.file("extra.pt"));
  ASSERT_EQ(extra.size(), 5u);
  EXPECT_TRUE(torch::equal(extra[0].second, torch::arange(6, torch::kDouble).view({2, 3}).t()));
  EXPECT_TRUE(torch::equal(extra[1].second, torch::tensor({1, -2, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(extra[2].second, torch::arange(3, 7, torch::kFloat)));
  EXPECT_TRUE(torch::equal(extra[3].second, torch::tensor({true, false})));
  EXPECT_TRUE(torch::equal(extra[4].second, torch::ones({2})));

  try {
    load_tensor_dict(dir_.file("list.pt"));
    ADD_FAILURE() << "a list was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a dict"), std::string::npos) << e.what();
  }
  try {
    load_tensor_dict(dir_.file("not_tensor.pt"));
    ADD_FAILURE() << "an int entry was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'n' is not a tensor"), std::string::npos) << e.what();
  }
}

TEST_F(PythonTensorFile, PythonReadsWhatCppWrote) {
  torch::manual_seed(2);
  auto dict = sample_dict();
  save_tensor_dict(dir_.file("cpp.pt"), dict);
  // Python checks against values it gets from a text dump written here.
  {
    std::ofstream f(dir_.file("expected.txt"));
    f.precision(17);
    for (const auto& [name, t] : dict) {
      auto flat = t.to(torch::kDouble).contiguous().view({-1});
      f << name << " " << c10::toString(t.scalar_type()) << " " << t.dim();
      for (auto s : t.sizes()) f << " " << s;
      for (int64_t k = 0; k < flat.numel(); ++k) f << " " << flat[k].item<double>();
      f << "\n";
    }
  }
  std::string log;
  const int rc = testing::run_python(dir_, R"PY(
import torch
d = torch.load("cpp.pt")
assert isinstance(d, dict), type(d)
import inspect
if "weights_only" in inspect.signature(torch.load).parameters:  # torch >= 1.13; the default from 2.6
    w = torch.load("cpp.pt", weights_only=True)
    assert list(w.keys()) == list(d.keys())
names = {"Float": torch.float32, "Double": torch.float64, "Long": torch.int64, "Half": torch.float16, "Bool": torch.bool}
lines = open("expected.txt").read().splitlines()
assert list(d.keys()) == [l.split()[0] for l in lines], list(d.keys())
for line in lines:
    parts = line.split()
    name, dtype, dim = parts[0], names[parts[1]], int(parts[2])
    shape = [int(s) for s in parts[3:3 + dim]]
    values = [float(v) for v in parts[3 + dim:]]
    t = d[name]
    assert t.dtype == dtype, (name, t.dtype)
    assert list(t.shape) == shape, (name, t.shape)
    assert torch.equal(t.double().reshape(-1), torch.tensor(values, dtype=torch.float64)), name
print("ok")
)PY",
                                     &log);
  EXPECT_EQ(rc, 0) << log;
}

}  // namespace
}  // namespace ddp::train
