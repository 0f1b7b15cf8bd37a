// Binding a cpp-httplib server with a listen backlog fit for bursts. Debian's cpp-httplib 0.11 is
// built with a backlog of 5: when more clients connect at once than the server accepts, the
// kernel drops their handshakes, they retry a second later, and some connections end up closed
// before a response (seen with 20 requests sent together). `bind_http` binds as httplib does
// (SO_REUSEADDR, the first address that works) and then raises the backlog with a second
// listen(2), which Linux applies to a socket already listening.
#pragma once

#include <httplib.h>

#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace coda {

// Serving https (vLLM's --ssl-certfile / --ssl-keyfile): a PEM certificate chain and its key.
struct TlsFiles {
  std::string cert, key;
  bool enabled() const { return !cert.empty() || !key.empty(); }
};

// A plain HTTP server, or an https one with `tls`. A certificate or key that does not load sets
// `error` (naming the files) and gives a plain server, so that a constructor can make its server
// and bind() refuse to start instead of every handshake failing.
std::unique_ptr<httplib::Server> make_http_server(const TlsFiles& tls, std::string& error);

// Binds `server` to host:port (port 0: any free port) and returns the port.
Expected<int> bind_http(httplib::Server& server, const std::string& host, int port, int backlog = 1024);

// Ends the idle keep-alive connections of a server that has stopped listening on `local_port`:
// shuts down the read side of every connected socket of this process on that local port, so a
// worker waiting for a next request sees the end at once (instead of after the keep-alive
// timeout, 5 s), while an answer still being written is not cut. The end of a drain.
void end_idle_connections(int local_port);

// The connection of the request a handler is serving, watched for the client leaving. A handler
// that waits (a non-streaming generation, which writes nothing until the end) would otherwise run
// a generation nobody reads to its end: clients time out and retry, and each retry adds another
// (vLLM and llama-server abort such requests too). cpp-httplib 0.11 gives a handler no socket, so
// the watch finds it among the process's descriptors by the request's addresses, once, at the first
// look (a request answered before anyone looks pays nothing).
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req) : req_(req) {}
  // True once the client has closed its side or the connection broke (POLLRDHUP: the peer's FIN,
  // seen before any unread bytes, so a pipelined request or a TLS close_notify does not hide it).
  // False when the connection could not be found: nothing is cancelled on a guess.
  // Safe to call from several threads (a proxy's client watches while its session reads).
  bool gone() const;

 private:
  int find_socket() const;

  const httplib::Request& req_;
  mutable std::once_flag looked_;
  mutable int fd_ = -1;
};

}  // namespace coda
