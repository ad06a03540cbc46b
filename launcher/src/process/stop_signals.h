#pragma once
// The signals that stop a job (torchrun's --signals-to-handle, by default
// SIGTERM, SIGINT, SIGHUP and SIGQUIT). ddplaunch blocks them and reads them
// from its event loop's signalfd; each one received is forwarded to the
// workers, which then get the shutdown grace before SIGKILL.
//
// Threading: set_stop_signals() runs in main before any thread exists; the
// getter is safe from any thread afterwards.

#include <optional>
#include <string>
#include <vector>

namespace ddp {

/// "SIGTERM,SIGUSR1", "TERM,usr1" or numbers; nullopt with `why` set for an
/// unknown name, or a signal that cannot be handled (SIGKILL, SIGSTOP) or is
/// ddplaunch's own (SIGCHLD).
std::optional<std::vector<int>> parse_signal_list(const std::string& text, std::string& why);

/// Process-wide; the default is SIGTERM, SIGINT, SIGHUP, SIGQUIT.
void set_stop_signals(std::vector<int> signals);
const std::vector<int>& stop_signals();

}  // namespace ddp
