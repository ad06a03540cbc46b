#pragma once
// Conversions between the protocol's RankStacks and the plain RankStacks the
// merge works on. Used by the thin adapters only (local agent service,
// coordinator client and service).

#include "ddplaunch/v1/coordinator.pb.h"
#include "stacks/rank_stacks.h"

namespace ddp {

inline RankStacks from_proto(const ::ddplaunch::v1::RankStacks& in) {
  RankStacks out;
  out.rank = in.rank();
  out.language = in.language();
  out.note = in.note();
  for (const auto& t : in.threads()) {
    ThreadStack thread{t.name(), t.main(), {}};
    thread.frames.reserve(static_cast<size_t>(t.frames_size()));
    for (const auto& f : t.frames()) thread.frames.push_back({f.function(), f.file(), f.line(), f.code()});
    out.threads.push_back(std::move(thread));
  }
  return out;
}

inline void to_proto(const RankStacks& in, ::ddplaunch::v1::RankStacks& out) {
  out.set_rank(in.rank);
  out.set_language(in.language);
  out.set_note(in.note);
  for (const ThreadStack& t : in.threads) {
    auto* thread = out.add_threads();
    thread->set_name(t.name);
    thread->set_main(t.main);
    for (const StackFrame& f : t.frames) {
      auto* frame = thread->add_frames();
      frame->set_function(f.function);
      frame->set_file(f.file);
      frame->set_line(f.line);
      frame->set_code(f.code);
    }
  }
}

}  // namespace ddp
