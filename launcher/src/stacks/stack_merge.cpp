#include "stacks/stack_merge.h"

#include <algorithm>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "health/rank_list.h"

namespace ddp {

namespace {

// How many groups the text shows before "and N more groups".
constexpr size_t kShownGroups = 8;
// Longer source lines are cut: the stack line stays readable.
constexpr size_t kMaxCodeChars = 80;
constexpr const char* kFolded = "...";
constexpr const char* kSeparator = " -> ";
constexpr const char* kCulpritMark = "   <- likely culprit";

// Python's standard library, installed packages, torch, the launcher's
// Python companion (loaded into every Python rank), and the ddp runtime's
// sources (when the runtime resolves C++ frames to source lines).
constexpr std::string_view kLibraryPathParts[] = {
    "/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/torch/",
    "/_ddplaunch_companion/", "/sitecustomize.py", "/runtime/src/", "/ddp/runtime/",
};
// Where the system and the toolkits keep their libraries and headers.
constexpr std::string_view kSystemDirectories[] = {
    "/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/", "/usr/include/", "/usr/local/cuda",
};
// Object files of libraries, wherever installed (a conda environment, a venv).
constexpr std::string_view kLibraryObjectPrefixes[] = {
    "libc.", "libc-", "libm.", "libm-", "libpthread", "libdl", "librt", "ld-linux", "libstdc++", "libgcc_s",
    "libgomp", "libtorch", "libc10", "libcaffe2", "libgloo", "libnccl", "libgrpc", "libprotobuf", "libabsl",
    "libcuda", "libcudnn", "libcublas", "libnvidia", "libibverbs", "libpython", "python3", "libddp",
};
// C++ namespaces of the standard library, torch and the libraries it uses.
constexpr std::string_view kLibraryNamespaces[] = {
    "std::", "__gnu_cxx::", "__cxxabiv1::", "torch::", "c10::", "c10d::", "at::", "caffe2::", "gloo::",
    "grpc::", "grpc_core::", "google::protobuf::", "absl::", "pybind11::",
};
// C functions of libraries the program calls into.
constexpr std::string_view kLibraryCPrefixes[] = {"nccl", "pthread_"};
// The ddp runtime's namespace; its example programs nest their own in it and
// are programs like any other.
constexpr std::string_view kRuntimeNamespace = "ddp::";
constexpr std::string_view kProgramNamespaces[] = {"ddp::train::", "ddp::bench::"};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

template <size_t N>
bool contains_any(std::string_view s, const std::string_view (&parts)[N]) {
  return std::any_of(std::begin(parts), std::end(parts),
                     [s](std::string_view part) { return s.find(part) != std::string_view::npos; });
}

template <size_t N>
bool starts_with_any(std::string_view s, const std::string_view (&prefixes)[N]) {
  return std::any_of(std::begin(prefixes), std::end(prefixes),
                     [s](std::string_view prefix) { return starts_with(s, prefix); });
}

std::string_view basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view trimmed(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

/// Unwinders write "??" for a function they cannot name.
std::string_view known_function(const StackFrame& frame) {
  return frame.function == "??" ? std::string_view{} : std::string_view{frame.function};
}

/// Python frames carry a source file ("x.py") or a pseudo-file ("<string>").
bool is_python_frame(const StackFrame& frame) {
  return ends_with(frame.file, ".py") || ends_with(frame.file, ".pyx") || starts_with(frame.file, "<");
}

/// Where a C++ name's parameter list opens ("f(int) const" -> 1), or npos:
/// the '(' matching the last ')', when nothing but qualifiers follows it.
size_t parameter_list_start(std::string_view function) {
  const size_t close = function.rfind(')');
  if (close == std::string_view::npos) return std::string_view::npos;
  // "ns::(anonymous namespace)::f" has no parameter list.
  if (function.find("::", close) != std::string_view::npos) return std::string_view::npos;
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (function[i] == ')') ++depth;
    if (function[i] == '(' && --depth == 0) return i == 0 ? std::string_view::npos : i;
  }
  return std::string_view::npos;
}

/// "void gloo::allreduce<float>(Options&)" -> "gloo::allreduce<float>": the
/// name without return type and parameters, for telling whose code it is.
std::string_view qualified_name(std::string_view function) {
  const size_t params = parameter_list_start(function);
  if (params != std::string_view::npos) function = function.substr(0, params);
  int depth = 0;
  for (size_t i = function.size(); i-- > 0;) {
    const char c = function[i];
    if (c == '>' || c == ')') ++depth;
    if (c == '<' || c == '(') --depth;
    if (c == ' ' && depth == 0) return function.substr(i + 1);
  }
  return function;
}

/// _start, __libc_start_main, _PyEval_EvalFrameDefault: names C and C++
/// reserve to the implementation (a leading "__" or "_" and a capital).
bool is_reserved_c_name(std::string_view name) {
  if (name == "_start") return true;
  if (starts_with(name, "_Z")) return false;  // a name left mangled: anybody's code
  return name.size() >= 2 && name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z'));
}

bool is_library_path(std::string_view file) {
  return contains_any(file, kLibraryPathParts) || starts_with_any(file, kSystemDirectories);
}

bool is_runtime_name(std::string_view name) {
  return starts_with(name, kRuntimeNamespace) && !starts_with_any(name, kProgramNamespaces);
}

bool is_library_native_name(std::string_view function) {
  const std::string_view name = qualified_name(function);
  return starts_with_any(name, kLibraryNamespaces) || starts_with_any(name, kLibraryCPrefixes) ||
         is_reserved_c_name(name) || is_runtime_name(name);
}

/// A C or C++ frame: by its source or object file, else by its name.
bool is_library_native_frame(const StackFrame& frame) {
  return is_library_path(frame.file) || starts_with_any(basename(frame.file), kLibraryObjectPrefixes) ||
         is_library_native_name(known_function(frame));
}

/// "ddp::GlooCollective::all_reduce(std::vector<float>&)" ->
/// "ddp::GlooCollective::all_reduce(...)": demangled parameter lists run to
/// hundreds of characters and say little about where a rank waits.
std::string display_function(const StackFrame& frame) {
  const std::string_view function = known_function(frame);
  if (is_python_frame(frame)) return std::string(function);
  const size_t open = parameter_list_start(function);
  if (open == std::string_view::npos) return std::string(function);
  const size_t close = function.rfind(')');
  if (close == open + 1) return std::string(function);
  return fmt::format("{}(...){}", function.substr(0, open), function.substr(close + 1));
}

std::string display_code(std::string_view code) {
  code = trimmed(code);
  if (code.size() <= kMaxCodeChars) return std::string(code);
  return std::string(code.substr(0, kMaxCodeChars)) + "...";
}

// ---------------------------------------------------------------- grouping

/// A rank's key, pointing into the answers (which outlive the merge): its
/// key stack's frames, or its note when it has none.
struct KeyView {
  const std::vector<StackFrame>* frames = nullptr;
  const std::string* note = nullptr;
};

size_t hash_combine(size_t seed, size_t value) {
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

struct KeyHash {
  size_t operator()(const KeyView& key) const {
    const std::hash<std::string> text_hash;
    if (key.frames == nullptr) return text_hash(*key.note);
    size_t h = key.frames->size();
    for (const StackFrame& f : *key.frames) {
      h = hash_combine(h, text_hash(f.function));
      h = hash_combine(h, text_hash(f.file));
      h = hash_combine(h, std::hash<int>{}(f.line));
    }
    return h;
  }
};

bool same_frame(const StackFrame& a, const StackFrame& b) {
  return a.line == b.line && a.function == b.function && a.file == b.file;
}

struct KeyEqual {
  bool operator()(const KeyView& a, const KeyView& b) const {
    if (a.frames == nullptr || b.frames == nullptr) {
      return a.frames == b.frames && *a.note == *b.note;
    }
    return std::equal(a.frames->begin(), a.frames->end(), b.frames->begin(), b.frames->end(), same_frame);
  }
};

/// The main thread, else the first; nullptr when the rank sent no threads.
const ThreadStack* key_thread(const RankStacks& rank) {
  if (rank.threads.empty()) return nullptr;
  const auto main = std::find_if(rank.threads.begin(), rank.threads.end(),
                                 [](const ThreadStack& t) { return t.main; });
  return main != rank.threads.end() ? &*main : &rank.threads.front();
}

KeyView key_of(const RankStacks& rank) {
  static const std::string kNoStack = "answered without a stack";
  const ThreadStack* thread = key_thread(rank);
  if (thread != nullptr && !thread->frames.empty()) return KeyView{&thread->frames, nullptr};
  return KeyView{nullptr, rank.note.empty() ? &kNoStack : &rank.note};
}

struct FoldedStack {
  std::vector<std::string> frames;
  bool cut = false;
};

/// Index of the outermost frame shown: the first when at most
/// kMaxUserFrames user frames, else the kMaxUserFrames-th user frame
/// counted from the innermost (the frames outside it are cut).
size_t first_shown_frame(const std::vector<FrameKind>& kinds, bool& cut) {
  size_t first = 0;
  size_t users = 0;
  cut = false;
  for (size_t i = kinds.size(); i-- > 0;) {
    if (kinds[i] != FrameKind::kUser) continue;
    if (users == kMaxUserFrames) {
      cut = true;
      return first;
    }
    ++users;
    first = i;
  }
  return 0;
}

FoldedStack fold_stack(const std::vector<StackFrame>& frames) {
  FoldedStack out;
  std::vector<FrameKind> kinds;
  kinds.reserve(frames.size());
  for (const StackFrame& f : frames) kinds.push_back(classify_frame(f));
  const size_t innermost = frames.size() - 1;
  bool folding = false;
  for (size_t i = first_shown_frame(kinds, out.cut); i < frames.size(); ++i) {
    if (kinds[i] == FrameKind::kUser || i == innermost) {
      out.frames.push_back(format_frame(frames[i]));
      folding = false;
    } else if (!folding) {
      out.frames.emplace_back(kFolded);
      folding = true;
    }
  }
  return out;
}

StackGroup new_group(const KeyView& key) {
  StackGroup group;
  if (key.frames == nullptr) {
    group.note = *key.note;
    return group;
  }
  group.key_frames = *key.frames;
  FoldedStack folded = fold_stack(group.key_frames);
  group.frames = std::move(folded.frames);
  group.cut = folded.cut;
  group.innermost = format_frame(group.key_frames.back());
  return group;
}

/// Marks the groups holding a hinted rank; false when no hinted rank answered.
/// One group (every rank in the same place, as after a mismatched collective
/// that completed) names no one: its stack is no clue.
bool mark_hinted_groups(std::vector<StackGroup>& groups, const std::vector<int>& hint) {
  if (groups.size() < 2) return true;
  const std::unordered_set<int> hinted(hint.begin(), hint.end());
  bool marked = false;
  for (StackGroup& g : groups) {
    g.likely_culprit = std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) { return hinted.count(r) > 0; });
    marked = marked || g.likely_culprit;
  }
  return marked;
}

/// Groups are sorted by size descending: the last one is strictly smaller
/// than every other exactly when it is smaller than the one before it.
void mark_unique_smallest_group(std::vector<StackGroup>& groups) {
  if (groups.size() < 2) return;
  StackGroup& last = groups.back();
  if (last.count < groups[groups.size() - 2].count) last.likely_culprit = true;
}

// ---------------------------------------------------------------- text

/// "ranks 0,1 (2 of 3)" or "rank 2 (1 of 3)".
std::string ranks_label(const std::vector<int>& ranks, int asked) {
  return fmt::format("{} {} ({} of {})", ranks.size() == 1 ? "rank" : "ranks", format_ranks(ranks), ranks.size(),
                     asked);
}

std::string stack_text(const StackGroup& group) {
  if (!group.note.empty()) return group.note;
  std::string out = group.cut ? "... " : "";
  for (size_t i = 0; i < group.frames.size(); ++i) {
    if (i > 0) out += kSeparator;
    out += group.frames[i];
  }
  return out;
}

/// The groups the text shows: likely culprits always, the largest others
/// up to kShownGroups in all, in the groups' order.
std::vector<const StackGroup*> shown_groups(const std::vector<StackGroup>& groups) {
  const auto is_culprit = [](const StackGroup& g) { return g.likely_culprit; };
  const auto culprits = static_cast<size_t>(std::count_if(groups.begin(), groups.end(), is_culprit));
  size_t others_left = kShownGroups > culprits ? kShownGroups - culprits : 0;
  std::vector<const StackGroup*> shown;
  for (const StackGroup& g : groups) {
    if (g.likely_culprit) {
      shown.push_back(&g);
    } else if (others_left > 0) {
      shown.push_back(&g);
      --others_left;
    }
  }
  return shown;
}

}  // namespace

const char* to_string(FrameKind kind) {
  switch (kind) {
    case FrameKind::kUser: return "user";
    case FrameKind::kLibrary: return "library";
    case FrameKind::kUnknown: return "unknown";
  }
  return "unknown";
}

FrameKind classify_frame(const StackFrame& frame) {
  const std::string_view function = known_function(frame);
  if (frame.file.empty() && function.empty()) return FrameKind::kUnknown;
  const bool library = is_python_frame(frame) ? is_library_path(frame.file) : is_library_native_frame(frame);
  return library ? FrameKind::kLibrary : FrameKind::kUser;
}

std::string format_frame(const StackFrame& frame) {
  std::string out(basename(frame.file));
  if (!out.empty() && frame.line > 0) out += fmt::format(":{}", frame.line);
  const std::string function = display_function(frame);
  if (!function.empty()) out += (out.empty() ? "" : " ") + function;
  if (out.empty()) return "??";
  const std::string code = display_code(frame.code);
  if (!code.empty()) out += " (" + code + ")";
  return out;
}

MergedStacks merge_stacks(const std::vector<RankStacks>& answers, int asked, const std::vector<int>& culprit_hint) {
  MergedStacks merged;
  merged.asked = std::max(asked, 0);
  std::unordered_set<int> answered;
  std::unordered_map<KeyView, size_t, KeyHash, KeyEqual> group_of_key;
  for (const RankStacks& rank : answers) {
    if (rank.rank < 0 || !answered.insert(rank.rank).second) continue;
    const KeyView key = key_of(rank);
    const auto [it, added] = group_of_key.emplace(key, merged.groups.size());
    if (added) merged.groups.push_back(new_group(key));
    merged.groups[it->second].ranks.push_back(rank.rank);
  }
  for (StackGroup& g : merged.groups) {
    std::sort(g.ranks.begin(), g.ranks.end());
    g.count = static_cast<int>(g.ranks.size());
  }
  std::sort(merged.groups.begin(), merged.groups.end(), [](const StackGroup& a, const StackGroup& b) {
    return a.count != b.count ? a.count > b.count : a.ranks.front() < b.ranks.front();
  });
  for (int r = 0; r < merged.asked; ++r) {
    if (answered.count(r) == 0) merged.ranks_missing.push_back(r);
  }
  if (!mark_hinted_groups(merged.groups, culprit_hint)) mark_unique_smallest_group(merged.groups);
  return merged;
}

std::string format_merged_stacks(const MergedStacks& merged, int asked) {
  std::string out;
  const std::vector<const StackGroup*> shown = shown_groups(merged.groups);
  for (const StackGroup* g : shown) {
    out += fmt::format("  {}: {}{}\n", ranks_label(g->ranks, asked), stack_text(*g),
                       g->likely_culprit ? kCulpritMark : "");
  }
  if (shown.size() < merged.groups.size()) {
    int hidden_ranks = 0;
    for (const StackGroup& g : merged.groups) hidden_ranks += g.count;
    for (const StackGroup* g : shown) hidden_ranks -= g->count;
    const size_t hidden = merged.groups.size() - shown.size();
    out += fmt::format("  and {} more group{} ({} ranks)\n", hidden, hidden == 1 ? "" : "s", hidden_ranks);
  }
  if (!merged.ranks_missing.empty()) {
    out += fmt::format("  {}: did not answer\n", ranks_label(merged.ranks_missing, asked));
  }
  const bool culprit_named = std::any_of(merged.groups.begin(), merged.groups.end(),
                                         [](const StackGroup& g) { return g.likely_culprit; });
  if (merged.groups.size() >= 2 && !culprit_named) {
    out += fmt::format("  the {} groups differ, none smaller than every other: no group stands out\n",
                       merged.groups.size());
  }
  return out;
}

nlohmann::json merged_stacks_to_json(const MergedStacks& merged) {
  nlohmann::json groups = nlohmann::json::array();
  for (const StackGroup& g : merged.groups) {
    nlohmann::json frames = nlohmann::json::array();
    for (const StackFrame& f : g.key_frames) {
      frames.push_back({{"function", f.function},
                        {"file", f.file},
                        {"line", f.line},
                        {"code", f.code},
                        {"kind", to_string(classify_frame(f))}});
    }
    nlohmann::json group = {{"ranks", g.ranks},         {"count", g.count},
                            {"stack", g.frames},        {"cut", g.cut},
                            {"innermost", g.innermost}, {"likely_culprit", g.likely_culprit},
                            {"frames", std::move(frames)}};
    if (!g.note.empty()) group["note"] = g.note;
    groups.push_back(std::move(group));
  }
  return {{"asked", merged.asked}, {"groups", std::move(groups)}, {"did_not_answer", merged.ranks_missing}};
}

}  // namespace ddp
