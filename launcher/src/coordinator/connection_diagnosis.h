#pragma once
// ConnectionDiagnosis: works out, off the caller's thread, why a channel to the
// coordinator does not connect, so that a waiting rendezvous can say "cannot
// resolve n1" or "n1 (10.0.0.11) refused the connection on port 29400"
// instead of "still connecting".
//
// The diagnosis runs on a detached thread because a name lookup can block for
// as long as the name servers take; the agent must stay responsive (a SIGTERM
// during a rendezvous is honoured at once) and may exit while a lookup is still
// running. The thread touches only state it shares ownership of, never the
// object that started it.
//
// Threading: all members are thread-safe.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace ddp {

class ConnectionDiagnosis {
 public:
  /// diagnose: returns one line on what is wrong, or "" when nothing is
  /// (the connection works). It must own everything it uses.
  explicit ConnectionDiagnosis(std::function<std::string()> diagnose);

  /// Starts a diagnosis unless one is running; returns at once.
  void start();
  /// The most recent finished diagnosis ("" when none finished yet, or when
  /// the last one found nothing wrong).
  std::string latest() const;
  /// How long the running diagnosis has taken so far (zero when none runs):
  /// a long one is waiting on a name lookup.
  std::chrono::steady_clock::duration running_for() const;
  /// Starts one unless running, waits at most `budget` for it, then latest().
  std::string finish_within(std::chrono::milliseconds budget);

 private:
  struct Shared;
  std::function<std::string()> diagnose_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace ddp
