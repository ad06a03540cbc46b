// libFuzzer target for the Python companion's messages
// (companion/companion_messages.h): the bytes are one message as it arrives
// on the channel, fed to every parser.
// Invariants: a parser accepts exactly the messages companion_message_kind
// gives its kind; what it returns stays in the documented ranges and caps,
// holds valid UTF-8 only (it goes on in protobuf strings and JSON), and
// written back as the companion would send it, parses to the same value.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "companion/companion_messages.h"
#include "fuzz_check.h"

namespace {

using json = nlohmann::json;

constexpr size_t kMaxText = 4096;  // companion_messages.cpp's caps
constexpr size_t kMaxRecent = 64;
constexpr size_t kMaxThreads = 64;
constexpr size_t kMaxFrames = 256;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

void check_text(const std::string& s) {
  FUZZ_CHECK(s.size() <= kMaxText);
  FUZZ_CHECK(valid_utf8(s));
}

void check_hello(const std::string& text, ddp::CompanionMessageKind kind) {
  const std::optional<ddp::CompanionHello> h = ddp::parse_companion_hello(text);
  if (!h) return;
  FUZZ_CHECK(kind == ddp::CompanionMessageKind::kHello);
  FUZZ_CHECK(h->rank >= 0 && h->generation >= 0);
  for (const std::string* s : {&h->job_id, &h->token, &h->python, &h->torch, &h->announcements}) check_text(*s);
  const json out = {{"type", "hello"},          {"version", 1},         {"job_id", h->job_id},
                    {"token", h->token},        {"rank", h->rank},      {"local_rank", h->local_rank},
                    {"generation", h->generation}, {"python", h->python}, {"torch", h->torch},
                    {"announcements", h->announcements}};
  const std::optional<ddp::CompanionHello> again = ddp::parse_companion_hello(out.dump());
  FUZZ_CHECK(again && again->job_id == h->job_id && again->token == h->token && again->rank == h->rank &&
             again->local_rank == h->local_rank && again->generation == h->generation &&
             again->python == h->python && again->torch == h->torch && again->announcements == h->announcements);
}

json heartbeat_json(const ddp::RankReport& r) {
  json recent = json::array();
  for (const ddp::CollectiveSeen& c : r.recent) {
    recent.push_back({{"sequence", c.sequence}, {"op", c.op}, {"bytes", c.bytes}, {"dtype", c.dtype},
                      {"state", c.state},
                      {"age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(c.age).count()}});
  }
  return {{"type", "heartbeat"},         {"step", r.step},
          {"phase", ddp::to_string(r.phase)}, {"step_seconds", r.step_seconds},
          {"busy_seconds", r.busy_seconds}, {"last_enqueued", r.last_enqueued},
          {"last_started", r.last_started}, {"last_completed", r.last_completed},
          {"recent", recent},            {"exiting", r.exiting},
          {"announced", r.announced}};
}

bool same_heartbeat(const ddp::RankReport& a, const ddp::RankReport& b) {
  if (a.recent.size() != b.recent.size()) return false;
  for (size_t i = 0; i < a.recent.size(); ++i) {
    const ddp::CollectiveSeen &x = a.recent[i], &y = b.recent[i];
    if (x.sequence != y.sequence || x.op != y.op || x.bytes != y.bytes || x.dtype != y.dtype ||
        x.state != y.state || x.age != y.age) {
      return false;
    }
  }
  return a.step == b.step && a.phase == b.phase && a.step_seconds == b.step_seconds &&
         a.busy_seconds == b.busy_seconds && a.last_enqueued == b.last_enqueued &&
         a.last_started == b.last_started && a.last_completed == b.last_completed && a.exiting == b.exiting &&
         a.announced == b.announced;
}

void check_heartbeat(const std::string& text, ddp::CompanionMessageKind kind) {
  ddp::CompanionHello hello;
  hello.rank = 3;
  hello.local_rank = 1;
  hello.generation = 0;
  const std::optional<ddp::RankReport> r = ddp::parse_companion_heartbeat(text, hello, 4242, 0, "node0");
  FUZZ_CHECK(r.has_value() == (kind == ddp::CompanionMessageKind::kHeartbeat));
  if (!r) return;
  FUZZ_CHECK(r->rank == 3 && r->local_rank == 1 && r->pid == 4242 && r->node_rank == 0 && r->host == "node0");
  FUZZ_CHECK(r->step >= -1);
  FUZZ_CHECK(r->step_seconds >= 0 && r->step_seconds < 1e9);
  FUZZ_CHECK(r->busy_seconds >= 0 && r->busy_seconds < 1e9);
  FUZZ_CHECK(r->recent.size() <= kMaxRecent);
  for (const ddp::CollectiveSeen& c : r->recent) {
    FUZZ_CHECK(c.bytes >= 0 && c.age >= ddp::Duration::zero());
    check_text(c.op);
    check_text(c.dtype);
    check_text(c.state);
  }
  const std::optional<ddp::RankReport> again =
      ddp::parse_companion_heartbeat(heartbeat_json(*r).dump(), hello, 4242, 0, "node0");
  FUZZ_CHECK(again && same_heartbeat(*again, *r));
}

json stacks_json(const ddp::RankStacks& s) {
  json threads = json::array();
  for (const ddp::ThreadStack& t : s.threads) {
    json frames = json::array();
    for (const ddp::StackFrame& f : t.frames) {
      frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}, {"code", f.code}});
    }
    threads.push_back({{"name", t.name}, {"main", t.main}, {"frames", frames}});
  }
  return {{"type", "stacks"}, {"threads", threads}};
}

bool same_stacks(const ddp::RankStacks& a, const ddp::RankStacks& b) {
  if (a.threads.size() != b.threads.size()) return false;
  for (size_t i = 0; i < a.threads.size(); ++i) {
    const ddp::ThreadStack &x = a.threads[i], &y = b.threads[i];
    if (x.name != y.name || x.main != y.main || x.frames.size() != y.frames.size()) return false;
    for (size_t k = 0; k < x.frames.size(); ++k) {
      const ddp::StackFrame &f = x.frames[k], &g = y.frames[k];
      if (f.function != g.function || f.file != g.file || f.line != g.line || f.code != g.code) return false;
    }
  }
  return true;
}

void check_stacks(const std::string& text, ddp::CompanionMessageKind kind) {
  const std::optional<ddp::RankStacks> s = ddp::parse_companion_stacks(text, 5);
  FUZZ_CHECK(s.has_value() == (kind == ddp::CompanionMessageKind::kStacks));
  if (!s) return;
  FUZZ_CHECK(s->rank == 5 && s->language == "python");
  FUZZ_CHECK(s->threads.size() <= kMaxThreads);
  for (const ddp::ThreadStack& t : s->threads) {
    check_text(t.name);
    FUZZ_CHECK(t.frames.size() <= kMaxFrames);
    for (const ddp::StackFrame& f : t.frames) {
      FUZZ_CHECK(f.line >= 0);
      check_text(f.function);
      check_text(f.file);
      check_text(f.code);
    }
  }
  const std::optional<ddp::RankStacks> again = ddp::parse_companion_stacks(stacks_json(*s).dump(), 5);
  FUZZ_CHECK(again && same_stacks(*again, *s));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const ddp::CompanionMessageKind kind = ddp::companion_message_kind(text);
  check_hello(text, kind);
  check_heartbeat(text, kind);
  check_stacks(text, kind);
  return 0;
}
