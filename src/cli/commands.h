// Each subcommand registers its flags on the CLI11 app and a function that runs it. Subcommands
// only parse flags and call the library; errors go to stderr with a non-zero exit status.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace coda::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

void add_run(CLI::App& app, std::vector<Command>& out);
void add_synth(CLI::App& app, std::vector<Command>& out);
void add_bench_model(CLI::App& app, std::vector<Command>& out);
void add_inspect(CLI::App& app, std::vector<Command>& out);
void add_template(CLI::App& app, std::vector<Command>& out);
void add_chat(CLI::App& app, std::vector<Command>& out);
void add_analyze(CLI::App& app, std::vector<Command>& out);
void add_serve(CLI::App& app, std::vector<Command>& out);
void add_proxy(CLI::App& app, std::vector<Command>& out);  // coda proxy
void add_lab_bench(CLI::App& app, std::vector<Command>& out);  // coda bench
void add_lab_tune(CLI::App& app, std::vector<Command>& out);   // coda tune
void add_perplexity(CLI::App& app, std::vector<Command>& out);
void add_quantize(CLI::App& app, std::vector<Command>& out);
void add_threshold(CLI::App& app, std::vector<Command>& out);
void add_scan(CLI::App& app, std::vector<Command>& out);      // coda scan
void add_diagnose(CLI::App& app, std::vector<Command>& out);  // coda diagnose
void add_embed(CLI::App& app, std::vector<Command>& out);     // coda embed

// The bundled model: $CODA_MODEL, else ../share/coda/ beside an installed executable, else the nearest
// models/ above the executable (a build tree), else the source tree's models/.
std::string default_model_path();
// Every usable core (the affinity mask, up to 16): for batched work such as perplexity, quantize, synth.
int default_threads();
// -t's help where the default follows the model (engine/thread_choice.h).
inline constexpr const char* kThreadsHelp =
    "Compute threads (default: one per MiB of weights per token, up to all cores)";
int fail(const std::string& message);

}  // namespace coda::cli
