#pragma once
// Turns the program counters that thread_stacks.h captured into function,
// source file and line, the second half of dump_all_thread_stacks()
// (health.h). Runs on the requesting thread, never in a signal handler: it
// reads files and allocates freely.
//
// With libdw (the build found it; see runtime/CMakeLists.txt) it reads this
// process's module map and each module's symbol table and DWARF: function
// (demangled), file:line, and the calls the compiler inlined into a frame as
// frames of their own, so every function shows next to its own source line.
// Separate debug files are looked up locally only: a hung worker must not go
// to the network for them. Without libdw it falls back to dladdr(): exported
// function names, no file:line. A frame without any symbol reads
// "object+0xoffset".
//
// Threading: one StackSymbolizer per thread at a time; it is cheap enough to
// make one per dump (which also sees libraries loaded since the last one).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/runtime/health.h"

namespace ddp {

class StackSymbolizer {
 public:
  StackSymbolizer();  // takes the module map of this process now
  ~StackSymbolizer();
  StackSymbolizer(const StackSymbolizer&) = delete;
  StackSymbolizer& operator=(const StackSymbolizer&) = delete;

  /// pcs innermost first as RawThreadStack has them: pcs[0] the exact PC
  /// where the thread was interrupted, the rest return addresses (looked up
  /// one byte earlier, inside their call instruction). The frames come back
  /// outermost first.
  std::vector<StackFrameInfo> symbolize(const std::vector<uintptr_t>& pcs);

  /// "libdw" or "dladdr": what this build symbolizes with.
  static const char* backend();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The C++ name for a mangled symbol; the symbol itself when it is none.
std::string demangle_symbol(const char* symbol);

}  // namespace ddp
