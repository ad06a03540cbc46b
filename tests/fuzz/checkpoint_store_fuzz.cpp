// libFuzzer target for CheckpointStore::load_latest
// (runtime/common/include/ddp/common/checkpoint_store.h): how ddptrain
// reads its checkpoints back after a restart, header, lengths, CRCs,
// trailer and JSON metadata, from files that may have been cut short,
// damaged or written by something else.
//
// Each input becomes the newest checkpoint file (step 7) in a directory
// that also holds a valid older one (step 3). Both CRCs would reject almost
// every raw mutation, so most inputs describe a file that this harness
// assembles and checksums itself:
//   byte 0      mode: 0 = the rest is the whole file as it is
//   byte 1      flags: 0x01 version from byte 2 (else 1), 0x02 the header
//               says step 8, 0x04 lengths from the 16 bytes after byte 5,
//               0x08 bad data CRC, 0x10 bad header CRC, 0x20 bad trailer,
//               0x40 cut byte 3 + 1 bytes off the end, 0x80 one byte too many
//   byte 2      version (with 0x01)
//   byte 3      how much to cut (with 0x40)
//   bytes 4-5   u16 little-endian metadata length m
//   [16 bytes]  metadata length, payload length, u64 little-endian (0x04)
//   m bytes     metadata (JSON text)
//   the rest    payload
// tests/fuzz/make_seeds.py writes seeds in this form.
//
// Invariants: load_latest() returns step 7 exactly as the file holds it,
// or else the older step 3 intact, with step 7 listed as skipped for a
// one-line reason; a checkpoint it returns, saved again, loads back the
// same, and byte for byte the same file when its metadata was written
// canonically (as save() writes it).

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/checkpoint_store.h"
#include "fuzz_check.h"

namespace {

using json = nlohmann::json;

constexpr int64_t kStep = 7;
constexpr int64_t kOlderStep = 3;
const char kOlderPayload[] = "older payload";

// The directories made, removed when the process exits (a crash leaves
// them, with the input).
std::vector<std::string>& made_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

// A new directory, on a RAM file system where there is one.
std::string make_dir(const char* name) {
  const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  std::string tmpl = std::string(base) + "/" + name + ".XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  if (made_dirs().empty()) {
    std::atexit([] {
      std::error_code ignored;
      for (const std::string& dir : made_dirs()) std::filesystem::remove_all(dir, ignored);
    });
  }
  made_dirs().push_back(tmpl);
  return tmpl;
}

// The store under test, with the older checkpoint already saved.
ddp::CheckpointStore& store() {
  static ddp::CheckpointStore s = [] {
    ddp::CheckpointStore made(make_dir("checkpoint_store_fuzz"), 100);
    made.save(kOlderStep, json{{"next_step", kOlderStep}}, kOlderPayload);
    return made;
  }();
  return s;
}

// Where returned checkpoints are saved again.
ddp::CheckpointStore& resave_store() {
  static ddp::CheckpointStore s(make_dir("checkpoint_store_fuzz_resave"), 1);
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FUZZ_CHECK(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  FUZZ_CHECK(std::fclose(f) == 0);
}

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}
void put_u64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
uint32_t crc(uint32_t c, const std::string& s, size_t from, size_t n) {
  return static_cast<uint32_t>(crc32(c, reinterpret_cast<const Bytef*>(s.data() + from), static_cast<uInt>(n)));
}

// The file the input describes (see the top of the file).
std::string assemble(const uint8_t* data, size_t size) {
  if (data[0] == 0) return std::string(reinterpret_cast<const char*>(data + 1), size - 1);
  uint8_t head[6] = {};
  std::memcpy(head, data, std::min(size, sizeof head));
  size_t pos = std::min(size, sizeof head);
  const uint8_t flags = head[1];
  std::optional<uint64_t> lengths[2];
  if ((flags & 0x04) && size - pos >= 16) {
    lengths[0] = get_u64(data + pos);
    lengths[1] = get_u64(data + pos + 8);
    pos += 16;
  }
  const size_t meta_len = std::min<size_t>(head[4] | (size_t{head[5]} << 8), size - pos);
  const std::string meta(reinterpret_cast<const char*>(data + pos), meta_len);
  const std::string payload(reinterpret_cast<const char*>(data + pos + meta_len), size - pos - meta_len);

  std::string file(48, '\0');
  std::memcpy(file.data(), "DDPCKPT", 8);
  put_u32(file, 8, (flags & 0x01) ? head[2] : 1);
  put_u64(file, 16, (flags & 0x02) ? kStep + 1 : kStep);
  put_u64(file, 24, lengths[0].value_or(meta.size()));
  put_u64(file, 32, lengths[1].value_or(payload.size()));
  file += meta;
  file += payload;
  uint32_t data_crc = crc(crc(0, file, 0, 40), file, 48, meta.size() + payload.size());
  if (flags & 0x08) data_crc ^= 1;
  put_u32(file, 40, data_crc);
  uint32_t header_crc = crc(0, file, 0, 44);
  if (flags & 0x10) header_crc ^= 1;
  put_u32(file, 44, header_crc);
  file += (flags & 0x20) ? "DDPCKENd" : "DDPCKEND";
  if (flags & 0x40) file.resize(file.size() - std::min<size_t>(file.size(), size_t{head[3]} + 1));
  if (flags & 0x80) file += 'x';
  return file;
}

// The metadata and payload the file holds where its layout is a checkpoint's.
bool split(const std::string& file, std::string& meta, std::string& payload) {
  if (file.size() < 56) return false;
  const uint64_t m = get_u64(reinterpret_cast<const uint8_t*>(file.data()) + 24);
  const uint64_t p = get_u64(reinterpret_cast<const uint8_t*>(file.data()) + 32);
  if (m > file.size() || p > file.size() || 56 + m + p != file.size()) return false;
  meta = file.substr(48, m);
  payload = file.substr(48 + m, p);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  ddp::CheckpointStore& s = store();
  const std::string path = s.path_for(kStep);
  const std::string file = assemble(data, size);
  write_file(path, file);

  std::vector<ddp::SkippedCheckpoint> skipped;
  const std::optional<ddp::Checkpoint> got = s.load_latest(&skipped);
  FUZZ_CHECK(got.has_value());  // step 3 at least
  if (got->step == kOlderStep) {
    // Step 7 was refused: step 3 comes back intact, and the refusal says why.
    FUZZ_CHECK(got->path == s.path_for(kOlderStep));
    FUZZ_CHECK(got->payload == kOlderPayload && got->metadata == json({{"next_step", kOlderStep}}));
    FUZZ_CHECK(skipped.size() == 1 && skipped[0].path == path);
    FUZZ_CHECK(!skipped[0].reason.empty() && skipped[0].reason.find('\n') == std::string::npos);
    return 0;
  }
  FUZZ_CHECK(got->step == kStep && got->path == path && skipped.empty());
  std::string meta_text, payload;
  FUZZ_CHECK(split(file, meta_text, payload));
  FUZZ_CHECK(got->payload == payload);
  FUZZ_CHECK(got->metadata == json::parse(meta_text));

  // Saved again, it loads back the same; canonical metadata: the same file.
  ddp::CheckpointStore& again = resave_store();
  const std::string again_path = again.save(kStep, got->metadata, got->payload);
  if (meta_text == got->metadata.dump()) FUZZ_CHECK(read_file(again_path) == file);
  const std::optional<ddp::Checkpoint> reloaded = again.load_latest();
  FUZZ_CHECK(reloaded && reloaded->step == kStep && reloaded->payload == got->payload);
  FUZZ_CHECK(reloaded->metadata.dump() == got->metadata.dump());
  return 0;
}
