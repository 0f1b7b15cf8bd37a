#include "server/http_listen.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
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

namespace {

// The numeric host and the port of a socket address, as cpp-httplib writes them into a request.
bool host_and_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// Calls `visit(fd, peer, peer_len, local)` for every connected socket of this process (a listening
// socket has no peer), until it returns true.
template <class Visit>
void each_connected_socket(Visit visit) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t plen = sizeof peer, llen = sizeof local;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &llen) != 0)
      continue;
    if (visit(static_cast<int>(fd), peer, plen, local)) break;
  }
  closedir(dir);
}

}  // namespace

int ClientWatch::find_socket() const {
  const httplib::Request& req = req_;
  if (req.remote_port <= 0 || req.local_port <= 0) return -1;
  int found = -1;
  each_connected_socket([&](int fd, const sockaddr_storage& peer, socklen_t plen, const sockaddr_storage& local) {
    if (port_of(peer) != req.remote_port || port_of(local) != req.local_port) return false;
    std::string peer_host;
    int peer_port = 0;
    if (!host_and_port(peer, plen, peer_host, peer_port) || peer_host != req.remote_addr) return false;
    found = fd;
    return true;
  });
  return found;
}

void end_idle_connections(int local_port) {
  each_connected_socket([&](int fd, const sockaddr_storage&, socklen_t, const sockaddr_storage& local) {
    if (port_of(local) == local_port) ::shutdown(fd, SHUT_RD);  // accepted on our port
    return false;
  });
}

bool ClientWatch::gone() const {
  std::call_once(looked_, [this] { fd_ = find_socket(); });
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace coda
