#pragma once
// Every thread's stack of one rank, as the rank answered a request for them
// (Python ranks through the companion, C++ ranks through the runtime), or the
// agent's note for a rank that could not answer. Plain data: the protocol
// adapters convert from and to the RankStacks message.

#include <string>
#include <vector>

namespace ddp {

struct StackFrame {
  std::string function;  // demangled C++ name or Python function; empty: unknown
  std::string file;      // source file where known, else the object file
  int line = 0;          // 0: unknown
  std::string code;      // the source line's text, where known (Python)
};

struct ThreadStack {
  std::string name;                 // "MainThread", "thread 1234", ...
  bool main = false;                // the program's main thread
  std::vector<StackFrame> frames;   // outermost first
};

struct RankStacks {
  int rank = -1;
  std::string language;             // "python", "c++", or "process" (the agent's note)
  std::vector<ThreadStack> threads;
  std::string note;                 // e.g. "stopped by a signal (state T): it cannot answer"
};

}  // namespace ddp
