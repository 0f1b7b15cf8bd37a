// Graceful shutdown, shared by `coda serve` and `coda proxy`. SIGTERM (Kubernetes, systemd, docker
// stop) and SIGINT (Ctrl-C) start a drain: the server stops taking work (GET /health answers 503
// "draining", new requests 503 with Retry-After, so a load balancer moves on), lets the requests in
// flight finish within --shutdown-timeout, ends the rest with a proper terminal event, and only then
// stops listening. A second signal ends the process at once, for an operator who will not wait.
//
// A signal handler may do almost nothing (async-signal-safe calls only), so the handler writes the
// signal's number into a pipe and the drain runs on the watcher thread that reads it.
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "server/http_api.h"

namespace coda {

class ShutdownWatch {
 public:
  // Installs the SIGTERM and SIGINT handlers. At the first one the watcher thread says on stderr that
  // `who` ("coda serve") drains, runs `drain(timeout_s)` (true: everything finished in time), and
  // says how it ended, `cut` being what happened to the requests left when the time ran out. Only
  // one watch may exist at a time (signal dispositions are per process).
  ShutdownWatch(std::string who, double timeout_s, std::function<bool(double)> drain, std::string cut);
  // Waits for a drain in progress to end; with no signal received, stops the watcher.
  ~ShutdownWatch();
  ShutdownWatch(const ShutdownWatch&) = delete;
  ShutdownWatch& operator=(const ShutdownWatch&) = delete;

 private:
  std::thread watcher_;
};

// Exit status of a process ended by a second signal: 128 + the signal, as a shell reports it.
constexpr int kSecondSignalExitBase = 128;

// The steady-clock time `seconds` (0 or more) from now.
std::chrono::steady_clock::time_point deadline_in(double seconds);

// Polls `done` every 10 ms until it holds or `until` passes; returns whether it holds.
bool wait_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point until);

// The end of a drain, once the work is over: waits (at most 10 s) until every answer has been
// written to its end, since cpp-httplib's stop() cuts a chunked answer short; then stops `http`
// (serve() returns) and ends the idle keep-alive connections on `port` (end_idle_connections), so
// that they do not hold the process for the keep-alive timeout.
void stop_when_answered(httplib::Server& http, const OpenRequests& open, int port);

}  // namespace coda
