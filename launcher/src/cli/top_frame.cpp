#include "cli/top_frame.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "cli/rank_table.h"

namespace ddp {
namespace {

// Clears from the cursor to the end of its line, and to the end of the screen.
constexpr const char* kClearLineEnd = "\x1b[K";
constexpr const char* kClearScreenEnd = "\x1b[J";
constexpr const char* kCursorHome = "\x1b[H";

// The first `columns` characters of a line (UTF-8: continuation bytes do not
// count), so that a long row does not wrap onto the next and push the
// frame past the screen's height.
std::string cut_to_width(const std::string& line, int columns) {
  int shown = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const bool continuation = (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80;
    if (!continuation && ++shown > columns) return line.substr(0, i);
  }
  return line;
}

// How many of the job's last warnings a frame shows: a few on a terminal,
// where they share the screen with the ranks; as many as `status` elsewhere.
constexpr size_t kWarningsOnTerminal = 3;
constexpr size_t kWarningsInText = 10;

bool in_trouble(const RankRow& row) {
  return row.state == "silent" || row.state == "late" || row.state == "exited" || row.warned;
}

}  // namespace

std::string render_top_frame(const nlohmann::json& s, const TopScreen& screen) {
  RankTable table = rank_table(s);
  const nlohmann::json& health = s.contains("ranks") ? s["ranks"] : nlohmann::json::object();
  const std::optional<std::string> forming = rendezvous_line(s);
  std::vector<std::string> lines{
      forming ? job_line(s) : fmt::format("{}, {} monitored", job_line(s), health.value("monitored_ranks", 0))};
  if (s.contains("failure")) lines.push_back(fmt::format("failure: {}", s["failure"].get<std::string>()));
  if (forming) lines.push_back(*forming);
  for (std::string& line : warning_lines(s, screen.terminal ? kWarningsOnTerminal : kWarningsInText)) {
    lines.push_back(std::move(line));
  }
  if (!forming) lines.push_back(table.header);

  std::vector<RankRow>& rows = table.rows;
  size_t hidden = 0;
  if (screen.terminal) {
    // rows - 1 lines in all: a newline on the screen's last line would scroll it.
    const size_t room = static_cast<size_t>(std::max(screen.rows - 1, 1));
    const size_t for_ranks = room > lines.size() ? room - lines.size() : 0;
    if (rows.size() > for_ranks) {
      std::stable_partition(rows.begin(), rows.end(), in_trouble);
      const size_t shown = for_ranks > 0 ? for_ranks - 1 : 0;  // one line says how many more
      hidden = rows.size() - shown;
      rows.resize(shown);
    }
  }
  for (const RankRow& row : rows) lines.push_back(row.text);
  if (hidden > 0) lines.push_back(fmt::format("... {} more rank(s)", hidden));

  std::string out;
  if (!screen.terminal) {
    for (const std::string& line : lines) out += line + "\n";
    return out;
  }
  const size_t room = static_cast<size_t>(std::max(screen.rows - 1, 1));
  if (lines.size() > room) lines.resize(room);  // a screen smaller than the header
  out += kCursorHome;
  for (const std::string& line : lines) out += cut_to_width(line, screen.columns) + kClearLineEnd + "\n";
  out += kClearScreenEnd;
  return out;
}

}  // namespace ddp
