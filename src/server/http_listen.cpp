#include "server/http_listen.h"

#include <sys/socket.h>

#include <atomic>
#include <memory>

namespace coda {

std::unique_ptr<httplib::Server> make_http_server(const TlsFiles& tls, std::string& error) {
  if (!tls.enabled()) return std::make_unique<httplib::Server>();
  if (tls.cert.empty() || tls.key.empty()) {
    error = "https needs both a certificate (--ssl-certfile) and its key (--ssl-keyfile)";
    return std::make_unique<httplib::Server>();
  }
  auto server = std::make_unique<httplib::SSLServer>(tls.cert.c_str(), tls.key.c_str());
  if (!server->is_valid()) {
    error = "cannot serve https with certificate '" + tls.cert + "' and key '" + tls.key +
            "': each must be a readable PEM file, and the key must match the certificate";
    return std::make_unique<httplib::Server>();
  }
  return server;
}

Expected<int> bind_http(httplib::Server& server, const std::string& host, int port, int backlog) {
  // httplib creates the socket and applies the options before binding it: the hook sees its fd.
  auto fd = std::make_shared<std::atomic<int>>(-1);
  server.set_socket_options([fd](socket_t sock) {
    httplib::default_socket_options(sock);
    fd->store(static_cast<int>(sock));
  });
  int bound = port;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
    if (bound < 0) return Error("cannot bind to " + host);
  } else if (!server.bind_to_port(host, port)) {
    return Error("cannot listen on " + host + ":" + std::to_string(port) + " (in use? give another --port)");
  }
  if (fd->load() >= 0) ::listen(fd->load(), backlog);  // raise the backlog; harmless if it fails
  return bound;
}

}  // namespace coda
