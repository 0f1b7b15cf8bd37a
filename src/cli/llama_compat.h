// llama.cpp's command lines run under coda as written: its several-letter short options
// (-ngl, -np, -ctk, ...) and the GPU flags its users put in every llama-server or llama-cli line.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace coda::cli {

// CLI11 reads "-ngl" as the one-letter options -n -g -l (and "-fa" as -f with the value "a"), so
// llama.cpp's several-letter short options are replaced by their long names before parsing:
// -ngl --n-gpu-layers, -fa --flash-attn, -ctk --cache-type-k, -ctv --cache-type-v, -np --parallel,
// -cb --cont-batching, -to --timeout, -no-cnv --no-conversation, -ub --ubatch-size. Arguments after a bare "--" are left as they are. A
// long name that the subcommand does not take is refused by the parser under that name.
std::vector<std::string> expand_llama_short_options(int argc, const char* const* argv);

// --n-gpu-layers/--gpu-layers N and --flash-attn [on|off|auto] (also 1, 0, -1, and no value as in
// older llama.cpp), accepted wherever a command runs the model in-process. coda runs every layer on
// the CPU and its attention always works in chunks with an online softmax, flash attention's
// method; a value that asks for something else gets a note on stderr, not an error.
void add_llama_device_flags(CLI::App* sub);

}  // namespace coda::cli
