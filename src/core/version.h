// coda's version, as `coda --version` and the server's GET /version report it.
#pragma once

namespace coda {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace coda
