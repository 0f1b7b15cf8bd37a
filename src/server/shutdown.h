// Graceful shutdown, shared by `coda serve` and `coda proxy`. SIGTERM (Kubernetes, systemd, docker
// stop) and SIGINT (Ctrl-C) start a drain: the server stops taking work (GET /health answers 503
// "draining", new requests 503 with Retry-After, so a load balancer moves on), lets the requests in
// flight finish within --shutdown-timeout, ends the rest with a proper terminal event, and only then
// stops listening. A second signal ends the process at once, for an operator who will not wait.
//
// A signal handler may do almost nothing (async-signal-safe calls only), so the handler writes the
// signal's number into a pipe and the drain runs on the watcher thread that reads it.
#pragma once

#include <functional>
#include <thread>

namespace coda {

class ShutdownWatch {
 public:
  // Installs the SIGTERM and SIGINT handlers; `drain(signal)` runs on the watcher thread at the first
  // one. Only one watch may exist at a time (signal dispositions are per process).
  explicit ShutdownWatch(std::function<void(int)> drain);
  // Waits for a drain in progress to end; with no signal received, stops the watcher.
  ~ShutdownWatch();
  ShutdownWatch(const ShutdownWatch&) = delete;
  ShutdownWatch& operator=(const ShutdownWatch&) = delete;

 private:
  std::thread watcher_;
};

// Exit status of a process ended by a second signal: 128 + the signal, as a shell reports it.
constexpr int kSecondSignalExitBase = 128;

}  // namespace coda
