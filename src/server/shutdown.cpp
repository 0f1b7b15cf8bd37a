#include "server/shutdown.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

namespace coda {

namespace {

int g_shutdown_pipe[2] = {-1, -1};
std::atomic<int> g_shutdown_signals{0};

extern "C" void on_shutdown_signal(int sig) {
  if (g_shutdown_signals.fetch_add(1) >= 1) _exit(kSecondSignalExitBase + sig);  // the second: at once
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_shutdown_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

ShutdownWatch::ShutdownWatch(std::function<void(int)> drain) {
  g_shutdown_signals = 0;
  if (::pipe2(g_shutdown_pipe, O_CLOEXEC) != 0) g_shutdown_pipe[0] = g_shutdown_pipe[1] = -1;
  struct sigaction sa {};
  sa.sa_handler = on_shutdown_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  watcher_ = std::thread([drain = std::move(drain)] {
    unsigned char byte = 0;
    for (;;) {
      const ssize_t n = ::read(g_shutdown_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || byte == 0) return;  // 0: the watch is being destroyed
      drain(byte);
      return;
    }
  });
}

ShutdownWatch::~ShutdownWatch() {
  if (int none = 0; g_shutdown_signals.compare_exchange_strong(none, 1)) {
    // No signal came: wake the watcher with 0. A signal from here on ends the process at once, as
    // the server has stopped already.
    const unsigned char zero = 0;
    [[maybe_unused]] ssize_t n = ::write(g_shutdown_pipe[1], &zero, 1);
  }
  if (watcher_.joinable()) watcher_.join();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  ::close(g_shutdown_pipe[0]);
  ::close(g_shutdown_pipe[1]);
  g_shutdown_pipe[0] = g_shutdown_pipe[1] = -1;
}

}  // namespace coda
