#include "lab/outputs.h"

#include <filesystem>
#include <fstream>

namespace coda::lab {

Status write_output_files(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error("cannot create " + dir + ": " + ec.message());
  for (const auto& [name, text] : files) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f << text;
    if (!f) return Error("cannot write " + dir + "/" + name);
  }
  return Status::Ok();
}

}  // namespace coda::lab
