// Binding a cpp-httplib server with a listen backlog fit for bursts. Debian's cpp-httplib 0.11 is
// built with a backlog of 5: when more clients connect at once than the server accepts, the
// kernel drops their handshakes, they retry a second later, and some connections end up closed
// before a response (seen with 20 requests sent together). `bind_http` binds as httplib does
// (SO_REUSEADDR, the first address that works) and then raises the backlog with a second
// listen(2), which Linux applies to a socket already listening.
#pragma once

#include <httplib.h>

#include <string>

#include "core/status.h"

namespace coda {

// Binds `server` to host:port (port 0: any free port) and returns the port.
Expected<int> bind_http(httplib::Server& server, const std::string& host, int port, int backlog = 1024);

}  // namespace coda
