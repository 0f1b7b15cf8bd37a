#include "server/shutdown.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>

#include "server/http_listen.h"

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

ShutdownWatch::ShutdownWatch(std::string who, double timeout_s, std::function<bool(double)> drain,
                             std::string cut) {
  g_shutdown_signals = 0;
  if (::pipe2(g_shutdown_pipe, O_CLOEXEC) != 0) g_shutdown_pipe[0] = g_shutdown_pipe[1] = -1;
  struct sigaction sa {};
  sa.sa_handler = on_shutdown_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  watcher_ = std::thread([who = std::move(who), timeout_s, drain = std::move(drain), cut = std::move(cut)] {
    unsigned char byte = 0;
    for (;;) {
      const ssize_t n = ::read(g_shutdown_pipe[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || byte == 0) return;  // 0: the watch is being destroyed
      std::fprintf(stderr,
                   "%s: %s: draining (new requests get 503; %g s for the requests in flight; a second signal "
                   "exits at once)\n",
                   who.c_str(), byte == SIGINT ? "SIGINT" : "SIGTERM", timeout_s);
      const bool all = drain(timeout_s);
      std::fprintf(stderr, "%s: %s; stopped\n", who.c_str(),
                   all ? "every request in flight finished"
                       : ("the shutdown timeout ran out: " + cut).c_str());
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

std::chrono::steady_clock::time_point deadline_in(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(std::max(0.0, seconds)));
}

bool wait_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point until) {
  while (!done() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

void stop_when_answered(httplib::Server& http, const OpenRequests& open, int port) {
  wait_until([&open] { return open.count() == 0; }, deadline_in(10));
  http.stop();
  if (port > 0) end_idle_connections(port);
}

}  // namespace coda
