#include "nccl/nccl_log_line.h"

#include <cstdlib>

namespace ddp::nccl {
namespace {

using sv = std::string_view;

bool starts_with(sv s, sv p) { return s.size() >= p.size() && s.compare(0, p.size(), p) == 0; }
bool ends_with(sv s, sv p) { return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

sv trim_left(sv s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}
sv trim_right(sv s) {
  size_t n = s.size();
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) --n;
  return s.substr(0, n);
}
sv trim(sv s) { return trim_right(trim_left(s)); }

/// Parses a non-negative decimal at the front of s; advances s. -1 when none.
/// Saturates instead of overflowing on absurd input.
int64_t take_int(sv& s) {
  size_t i = 0;
  int64_t v = 0;
  while (i < s.size() && is_digit(s[i])) {
    if (v < (int64_t{1} << 40)) v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) return -1;
  s.remove_prefix(i);
  return v;
}

int to_int(int64_t v) { return v < 0 ? -1 : v > 0x7fffffff ? 0x7fffffff : static_cast<int>(v); }

int64_t parse_int_all(sv s) {
  sv t = s;
  int64_t v = take_int(t);
  return t.empty() ? v : -1;
}

/// Consumes p at the front of s if it is there.
bool eat(sv& s, sv p) {
  if (!starts_with(s, p)) return false;
  s.remove_prefix(p.size());
  return true;
}

/// The next whitespace-separated token of s; advances s past it.
sv take_token(sv& s) {
  s = trim_left(s);
  size_t e = s.find(' ');
  sv tok = s.substr(0, e);
  s.remove_prefix(e == sv::npos ? s.size() : e);
  return tok;
}

// ---- header -----------------------------------------------------------------

struct Marker {
  size_t pos = sv::npos;  // of "NCCL "
  size_t msg = 0;         // start of the message
  NcclLevel level = NcclLevel::kNone;
};

Marker find_marker(sv line) {
  Marker m;
  size_t from = 0;
  while (true) {
    size_t p = line.find("NCCL ", from);
    if (p == sv::npos) return m;
    sv rest = line.substr(p + 5);
    // Must start a word: at column 0 or after a space/']'.
    bool word = p == 0 || line[p - 1] == ' ' || line[p - 1] == ']' || line[p - 1] == ':' || line[p - 1] == '\t';
    if (word) {
      struct L { sv name; NcclLevel level; };
      static constexpr L kLevels[] = {{"INFO", NcclLevel::kInfo},
                                      {"WARN", NcclLevel::kWarn},
                                      {"TRACE", NcclLevel::kTrace},
                                      {"ABORT", NcclLevel::kAbort}};
      for (const auto& l : kLevels) {
        if (starts_with(rest, l.name) && (rest.size() == l.name.size() || rest[l.name.size()] == ' ')) {
          m.pos = p;
          m.level = l.level;
          m.msg = p + 5 + l.name.size() + (rest.size() > l.name.size() ? 1 : 0);
          return m;
        }
      }
      if (starts_with(rest, "version ")) {  // bare "NCCL version 2.x" of older versions
        m.pos = p;
        m.level = NcclLevel::kVersion;
        m.msg = p;
        return m;
      }
    }
    from = p + 5;
  }
}

/// Fills host/pid/tid/dev/location from the text in front of "NCCL <LEVEL>".
void parse_header(sv head, NcclLogLine& out) {
  head = trim_right(head);
  if (head.empty()) return;
  if (head.back() != ']') {
    // "file.cc:123" in front of WARN (and of some TRACE lines).
    size_t sp = head.rfind(' ');
    sv loc = sp == sv::npos ? head : head.substr(sp + 1);
    if (loc.find(':') != sv::npos && loc.find('.') != sv::npos) {
      out.location = loc;
      head = trim_right(sp == sv::npos ? sv{} : head.substr(0, sp));
    }
  }
  if (head.empty() || head.back() != ']') return;
  size_t lb = head.rfind('[');
  if (lb == sv::npos) return;
  int64_t dev = parse_int_all(head.substr(lb + 1, head.size() - lb - 2));
  if (dev >= 0) out.dev = to_int(dev);
  head = trim_right(head.substr(0, lb));
  size_t sp = head.find_last_of(" \t");
  sv tok = sp == sv::npos ? head : head.substr(sp + 1);
  // mpirun --tag-output: "[1,2]<stdout>:host:pid:tid"
  size_t tag = tok.find(">:");
  if (tag != sv::npos) tok.remove_prefix(tag + 2);
  size_t c2 = tok.rfind(':');
  if (c2 == sv::npos || c2 == 0) return;
  size_t c1 = tok.rfind(':', c2 - 1);
  if (c1 == sv::npos) return;
  int64_t pid = parse_int_all(tok.substr(c1 + 1, c2 - c1 - 1));
  int64_t tid = parse_int_all(tok.substr(c2 + 1));
  if (pid < 0) return;
  out.pid = pid;
  out.tid = tid;
  out.host = tok.substr(0, c1);
  out.process_key = tok.substr(0, c2);
}

// ---- messages ---------------------------------------------------------------

/// "comm 0x.. rank R nranks N cudaDev D [nvmlDev D] busId B [commId C] - Init COMPLETE"
bool parse_comm_line(sv msg, NcclLogLine& out) {
  size_t dash = msg.rfind(" - ");
  if (dash == sv::npos) return false;
  sv what = trim(msg.substr(dash + 3));
  if (what == "Init COMPLETE") {
    out.kind = NcclLineKind::kInitComplete;
  } else if (what == "Init START") {
    out.kind = NcclLineKind::kInitStart;
  } else if (ends_with(what, "COMPLETE")) {  // Destroy COMPLETE, Abort COMPLETE
    out.kind = NcclLineKind::kCommEnd;
  } else {
    return false;
  }
  sv s = msg.substr(0, dash);
  sv first = take_token(s);
  if (first != "comm") {
    out.init_api = first;
    if (take_token(s) != "comm") {
      out.kind = NcclLineKind::kOther;
      return false;
    }
  }
  out.comm_ptr = take_token(s);
  while (!s.empty()) {
    sv key = take_token(s);
    sv val = take_token(s);
    if (key.empty()) break;
    if (key == "rank") out.rank = to_int(parse_int_all(val));
    else if (key == "nranks" || key == "nRanks") out.nranks = to_int(parse_int_all(val));
    else if (key == "cudaDev") out.cuda_dev = to_int(parse_int_all(val));
    else if (key == "nvmlDev") out.nvml_dev = to_int(parse_int_all(val));
    else if (key == "busId") out.bus_id = val;
    else if (key == "commId") out.comm_id = val;
  }
  if (out.rank < 0) {
    out.kind = NcclLineKind::kOther;
    return false;
  }
  return true;
}

/// "Init timings: rank 5 nranks 8 total 2.46 (...)" and
/// "Init timings - ncclCommInitRank: rank 0 nranks 8 total 1.23 (...)"
void parse_init_timings(sv msg, NcclLogLine& out) {
  size_t r = msg.find("rank ");
  if (r == sv::npos) return;
  sv s = msg.substr(r);
  while (!s.empty()) {
    sv key = take_token(s);
    if (key.empty()) break;
    if (key == "rank") out.rank = to_int(take_int(s = trim_left(s)));
    else if (key == "nranks") out.nranks = to_int(take_int(s = trim_left(s)));
    else if (key == "total") {
      sv val = take_token(s);
      char buf[32];
      size_t n = val.size() < sizeof(buf) - 1 ? val.size() : sizeof(buf) - 1;
      val.copy(buf, n);
      buf[n] = '\0';
      char* end = nullptr;
      double d = std::strtod(buf, &end);
      if (end != buf) out.total_seconds = d;
      break;
    }
  }
  if (out.rank >= 0) out.kind = NcclLineKind::kInitTimings;
}

/// "[bracket]" right at the front of s: returns its content, advances s.
bool take_bracket(sv& s, sv& content) {
  if (s.empty() || s[0] != '[') return false;
  size_t e = s.find(']');
  if (e == sv::npos) return false;
  content = s.substr(1, e - 1);
  s.remove_prefix(e + 1);
  return true;
}

/// After "Channel " / "Ring " / "CollNet ": "NN[/MM] : <ring> | <src>[d] -> <dst>[d] [send] via T"
void parse_channel(sv s, NcclLogLine& out) {
  int64_t ch = take_int(s);
  if (ch < 0) return;
  out.channel = to_int(ch);
  int64_t second = -1;
  if (eat(s, "/")) second = take_int(s);
  s = trim_left(s);
  if (!eat(s, ":")) return;
  s = trim_left(s);
  sv probe = s;
  int64_t first = take_int(probe);
  if (first < 0) return;
  size_t arrow = s.find(" -> ");
  if (arrow == sv::npos) {
    // A ring: "0 1 2 3" (only digits and spaces).
    for (char c : s)
      if (!is_digit(c) && c != ' ' && c != '\t' && c != '\r') return;
    out.kind = NcclLineKind::kRing;
    out.nchannels = to_int(second);
    return;
  }
  out.src_rank = to_int(first);
  s = probe;
  take_bracket(s, out.src_dev);
  s = trim_left(s);
  if (!eat(s, "->")) return;
  s = trim_left(s);
  int64_t dst = take_int(s);
  if (dst < 0) return;
  out.dst_rank = to_int(dst);
  take_bracket(s, out.dst_dev);
  s = trim_left(s);
  if (eat(s, "[send]")) out.direction = TransportDirection::kSend;
  else if (eat(s, "[receive]")) out.direction = TransportDirection::kReceive;
  s = trim_left(s);
  if (!eat(s, "via ")) return;
  out.transport = trim(s);
  if (out.transport.empty()) return;
  out.kind = NcclLineKind::kTransport;
}

/// "CollNet 00/0 : 0 [receive] via COLLNET/SHARP/0/GDRDMA": rank to the network.
void parse_collnet(sv s, NcclLogLine& out) {
  int64_t ch = take_int(s);
  if (ch < 0) return;
  out.channel = to_int(ch);
  if (eat(s, "/")) take_int(s);
  s = trim_left(s);
  if (!eat(s, ":")) return;
  s = trim_left(s);
  int64_t r = take_int(s);
  if (r < 0) return;
  s = trim_left(s);
  if (eat(s, "[send]")) out.direction = TransportDirection::kSend;
  else if (eat(s, "[receive]")) out.direction = TransportDirection::kReceive;
  s = trim_left(s);
  if (!eat(s, "via ")) return;
  out.src_rank = out.dst_rank = to_int(r);
  out.transport = trim(s);
  if (!out.transport.empty()) out.kind = NcclLineKind::kTransport;
}

/// "16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, 1 p2p channels per peer"
void parse_channel_counts(sv s, NcclLogLine& out) {
  bool any = false;
  while (!s.empty()) {
    s = trim_left(s);
    int64_t n = take_int(s);
    if (n < 0) break;
    s = trim_left(s);
    sv word = s.substr(0, s.find(' '));
    size_t comma = s.find(',');
    sv item = s.substr(0, comma);
    if (word == "coll") out.coll_channels = to_int(n), any = true;
    else if (word == "nvls") out.nvls_channels = to_int(n), any = true;
    else if (word == "collnet") out.collnet_channels = to_int(n), any = true;
    else if (word == "p2p" && item.find("per peer") == sv::npos) out.p2p_channels = to_int(n), any = true;
    if (comma == sv::npos) break;
    s.remove_prefix(comma + 1);
  }
  if (any) out.kind = NcclLineKind::kChannelCounts;
}

/// "Using eth0:10.0.0.1<0>" / "Using [0]eth0:10.0.0.1<0>" -> iface, address
void parse_iface_address(sv s, NcclLogLine& out) {
  s = trim(s);
  if (!s.empty() && s[0] == '[') {
    size_t e = s.find(']');
    if (e != sv::npos) s.remove_prefix(e + 1);
  }
  size_t colon = s.find(':');
  if (colon == sv::npos || colon == 0) return;
  out.iface = s.substr(0, colon);
  sv addr = s.substr(colon + 1);
  size_t lt = addr.rfind('<');
  out.address = lt == sv::npos ? addr.substr(0, addr.find(' ')) : addr.substr(0, lt);
  out.kind = NcclLineKind::kBootstrap;
}

/// "file.cc:123 -> 5" (the INFO trail of an error return).
bool parse_error_trace(sv msg, NcclLogLine& out) {
  size_t arrow = msg.find(' ');
  if (arrow == sv::npos || arrow == 0) return false;
  sv loc = msg.substr(0, arrow);
  if (loc.find(':') == sv::npos || msg.compare(arrow, 4, " -> ") != 0) return false;
  sv rest = msg.substr(arrow + 4);
  int64_t code = take_int(rest);
  if (code < 0) return false;
  out.location = loc;
  out.error_code = to_int(code);
  out.kind = NcclLineKind::kErrorTrace;
  return true;
}

void parse_info(sv msg, NcclLogLine& out) {
  out.kind = NcclLineKind::kOther;
  if (msg.empty()) return;
  switch (msg[0]) {
    case 'C':
      if (eat(msg, "Channel ")) return parse_channel(msg, out);
      if (eat(msg, "CollNet ")) return parse_collnet(msg, out);
      break;
    case 'R':
      if (eat(msg, "Ring ")) return parse_channel(msg, out);  // NCCL 2.7 and older
      break;
    case 'N':
      if (eat(msg, "NCCL version ")) {
        out.text = take_token(msg);
        out.kind = NcclLineKind::kVersion;
        return;
      }
      if (starts_with(msg, "NCCL_")) {
        size_t sp = msg.find(' ');
        if (sp == sv::npos) return;
        sv name = msg.substr(0, sp);
        sv rest = msg.substr(sp);
        if (!eat(rest, " set by environment to ") && !eat(rest, " set to ")) return;
        rest = trim(rest);
        if (!rest.empty() && rest.back() == '.') rest.remove_suffix(1);
        out.env_name = name;
        out.env_value = rest;
        out.kind = NcclLineKind::kEnvOverride;
        return;
      }
      if (eat(msg, "NET/")) {
        size_t e = msg.find_first_of(" :");
        if (e == sv::npos || e == 0) return;
        sv net = msg.substr(0, e);
        if (net == "Plugin") return;
        sv rest = trim_left(msg.substr(e));
        if (!eat(rest, ":")) return;
        rest = trim_left(rest);
        if (eat(rest, "Using ")) {
          out.net = net;
          out.text = trim(rest);
          out.kind = NcclLineKind::kNetDevices;
        } else if (starts_with(rest, "No device found")) {
          out.net = net;
          out.kind = NcclLineKind::kNetNoDevice;
        }
        return;
      }
      if (eat(msg, "NVLS multicast support is ")) {
        out.flag = starts_with(msg, "available");
        out.kind = NcclLineKind::kNvlsSupport;
        return;
      }
      break;
    case 'B':
      if (eat(msg, "Bootstrap")) {
        msg = trim_left(msg);
        if (!eat(msg, ":")) return;
        msg = trim_left(msg);
        if (eat(msg, "Using ")) parse_iface_address(msg, out);
        return;
      }
      break;
    case 'U':
      if (eat(msg, "Using network ")) {
        out.text = trim(msg);
        out.kind = NcclLineKind::kNetwork;
        return;
      }
      break;
    case 'I':
      if (starts_with(msg, "Init timings")) return parse_init_timings(msg, out);
      break;
    case 'c':
    case 'n':
      if (ends_with(trim_right(msg), "COMPLETE") || ends_with(trim_right(msg), "START")) {
        parse_comm_line(msg, out);
        return;
      }
      break;
    default:
      if (is_digit(msg[0])) {
        if (msg.find(" channels") != sv::npos) return parse_channel_counts(msg, out);
      }
      break;
  }
  parse_error_trace(msg, out);
}

}  // namespace

NcclLogLine parse_nccl_line(std::string_view line) {
  NcclLogLine out;
  line = trim_right(line);
  Marker m = find_marker(line);
  if (m.pos == sv::npos) return out;
  out.level = m.level;
  parse_header(line.substr(0, m.pos), out);
  out.message = m.msg <= line.size() ? line.substr(m.msg) : sv{};
  switch (m.level) {
    case NcclLevel::kVersion: {
      sv msg = out.message;
      eat(msg, "NCCL version ");
      out.text = take_token(msg);
      out.kind = NcclLineKind::kVersion;
      break;
    }
    case NcclLevel::kWarn:
    case NcclLevel::kAbort:
      out.kind = NcclLineKind::kWarn;
      break;
    case NcclLevel::kInfo:
    case NcclLevel::kTrace:
      parse_info(out.message, out);
      break;
    case NcclLevel::kNone:
      break;
  }
  return out;
}

std::string_view transport_family(std::string_view via) {
  via = trim(via);
  auto component_end = [&](size_t from) {
    size_t e = via.find('/', from);
    return e == sv::npos ? via.size() : e;
  };
  if (starts_with(via, "P2P/") || starts_with(via, "NET/") || starts_with(via, "COLLNET/") ||
      starts_with(via, "CollNet/")) {
    size_t first = via.find('/');
    return via.substr(0, component_end(first + 1));
  }
  return via.substr(0, component_end(0));
}

bool transport_uses_gdr(std::string_view via) {
  return via.find("GDRDMA") != sv::npos || via.find("/GDR") != sv::npos;
}

}  // namespace ddp::nccl
