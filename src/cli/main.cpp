// The `coda` executable.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "core/version.h"
#include "engine/thread_choice.h"

namespace coda::cli {

std::string default_model_path() {
  const char* name = "coda-tiny-en-it-f16.gguf";
  if (const char* env = std::getenv("CODA_MODEL"); env != nullptr && *env != 0) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // Installed (`cmake --install`): PREFIX/bin/coda beside PREFIX/share/coda/.
    const auto installed = exe.parent_path().parent_path() / "share" / "coda" / name;
    if (std::filesystem::exists(installed, ec)) return installed.string();
    // In a build tree: the nearest models/ above the executable.
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      const auto candidate = dir / "models" / name;
      if (std::filesystem::exists(candidate, ec)) return candidate.string();
    }
  }
  return std::string(CODA_SOURCE_DIR) + "/models/" + name;
}

int default_threads() { return usable_cores(); }

int fail(const std::string& message) {
  std::fprintf(stderr, "coda: error: %s\n", message.c_str());
  return 1;
}

}  // namespace coda::cli

int main(int argc, char** argv) {
  CLI::App app{"coda: a CPU inference engine whose generations end well", "coda"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("coda ") + coda::kVersion);
  std::vector<coda::cli::Command> commands;
  coda::cli::add_run(app, commands);
  coda::cli::add_synth(app, commands);
  coda::cli::add_bench_model(app, commands);
  coda::cli::add_inspect(app, commands);
  coda::cli::add_template(app, commands);
  coda::cli::add_chat(app, commands);
  coda::cli::add_analyze(app, commands);
  coda::cli::add_serve(app, commands);
  coda::cli::add_proxy(app, commands);
  coda::cli::add_lab_bench(app, commands);
  coda::cli::add_lab_tune(app, commands);
  coda::cli::add_perplexity(app, commands);
  coda::cli::add_quantize(app, commands);
  coda::cli::add_threshold(app, commands);
  coda::cli::add_scan(app, commands);
  coda::cli::add_diagnose(app, commands);
  coda::cli::add_embed(app, commands);
  if (argc == 1) {  // `coda` alone: what it can do, as `git` answers, rather than a parse error
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  // llama.cpp's several-letter short options (-ngl, -np, -ctk) under their long names.
  const std::vector<std::string> args = coda::cli::expand_llama_short_options(argc, argv);
  std::vector<const char*> arg_ptrs;
  for (const auto& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& c : commands)
    if (c.app->parsed()) return c.run();
  return 1;
}
