#include "sigterm_guard.h"

#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

namespace ddp {

namespace {

sem_t g_wake;  // posted by the handler, once per SIGTERM
std::atomic<bool> g_installed{false};

void on_sigterm(int) { sem_post(&g_wake); }  // async-signal-safe

std::string read_intent(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  in >> word;
  return word;
}

[[noreturn]] void die_of_sigterm() {
  signal(SIGTERM, SIG_DFL);
  kill(getpid(), SIGTERM);  // this thread does not block it: delivered at once
  std::this_thread::sleep_for(std::chrono::seconds(1));
  _exit(128 + SIGTERM);
}

void decide_each_sigterm(const std::string& path, std::chrono::milliseconds wait) {
  bool told = false;
  for (;;) {
    if (sem_wait(&g_wake) != 0) continue;  // EINTR
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      const std::string word = read_intent(path);
      if (word == "terminating") die_of_sigterm();
      if (word == "stopping") {
        if (!told) {
          told = true;
          std::fprintf(stderr,
                       "ddp runtime: ignoring a SIGTERM from outside ddplaunch: ddplaunch is stopping the job at a "
                       "step boundary\n");
        }
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) die_of_sigterm();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace

bool install_sigterm_guard(const std::string& path, std::chrono::milliseconds wait) {
  if (path.empty()) return false;
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return false;
  if (g_installed.exchange(true)) return false;
  sem_init(&g_wake, 0, 0);
  std::thread(decide_each_sigterm, path, wait).detach();
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  return true;
}

bool install_sigterm_guard_from_environment() {
  const char* path = std::getenv("DDPLAUNCH_SIGNAL_INTENT_FILE");
  return path != nullptr && install_sigterm_guard(path);
}

}  // namespace ddp
