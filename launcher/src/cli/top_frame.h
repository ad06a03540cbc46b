#pragma once
// One refresh of `ddplaunch top`, made from a coordinator's status document
// (CoordinatorJob::status_json) and the screen it goes to. On a terminal the
// frame redraws the screen in place with ANSI escapes (cursor home, each line
// cleared to its end, the rest of the screen cleared), cut to the terminal's
// height and width; elsewhere (a pipe, a file) it is plain text with every
// rank, and `top` separates frames with a blank line.
//
// Threading: pure.

#include <string>

#include <nlohmann/json.hpp>

namespace ddp {

// Escapes `top` writes around its frames on a terminal.
inline constexpr const char* kHideCursor = "\x1b[?25l";
inline constexpr const char* kShowCursor = "\x1b[?25h";
inline constexpr const char* kClearScreen = "\x1b[H\x1b[2J";

struct TopScreen {
  bool terminal = false;  // false: plain text, no escapes, no cut
  int rows = 24;          // the terminal's size (TIOCGWINSZ), when terminal
  int columns = 80;
};

/// The frame: "job ...: generation ..., N of W rank(s) monitored", the
/// failure when the job has one, the last warnings given (3 on a terminal,
/// 10 elsewhere), the column names, then one row per rank. On a terminal,
/// where the ranks do not all fit in rows - 1 lines (the last stays free so
/// that the screen never scrolls), the ranks in trouble (silent, late,
/// exited, warned about) come first, then the others in rank order, and a
/// last line says "... K more rank(s)".
std::string render_top_frame(const nlohmann::json& status, const TopScreen& screen);

}  // namespace ddp
