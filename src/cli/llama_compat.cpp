#include "cli/llama_compat.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "core/strings.h"

namespace coda::cli {

std::vector<std::string> expand_llama_short_options(int argc, const char* const* argv) {
  static constexpr std::array<std::pair<const char*, const char*>, 9> kLong = {{
      {"-ngl", "--n-gpu-layers"},
      {"-fa", "--flash-attn"},
      {"-ctk", "--cache-type-k"},
      {"-ctv", "--cache-type-v"},
      {"-np", "--parallel"},
      {"-cb", "--cont-batching"},
      {"-to", "--timeout"},
      {"-no-cnv", "--no-conversation"},
      {"-ub", "--ubatch-size"},
  }};
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(argc));
  bool options_ended = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && !options_ended) {
      if (a == "--") {
        options_ended = true;
      } else {
        for (const auto& [short_name, long_name] : kLong)
          if (a == short_name) a = long_name;
        // Older llama.cpp's -fa took no value, and the flag takes an optional one, so in
        // `coda serve -fa model.gguf` the model would be read as its value: a GGUF file is not one.
        const std::string next = i + 1 < argc ? argv[i + 1] : "";
        if (a == "--flash-attn" && next.size() > 5 && next.compare(next.size() - 5, 5, ".gguf") == 0)
          a = "--flash-attn=on";
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

void add_llama_device_flags(CLI::App* sub) {
  // A count, or the words newer llama.cpp builds also take for "as many as fit".
  sub->add_option_function<std::string>(
         "--n-gpu-layers,--gpu-layers",
         [](const std::string& v) {
           if (v != "0")
             std::fprintf(stderr, "coda: note: --n-gpu-layers %s ignored: coda runs every layer on the CPU\n",
                          v.c_str());
         },
         "Accepted for llama.cpp command lines (-ngl); coda runs every layer on the CPU")
      ->type_name("N")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            double n = 0;
            if (v == "auto" || v == "all" || (parse_number(v, n) && n == std::floor(n))) return "";
            return "'" + v + "' is not a layer count (or auto, all)";
          },
          "N", "layer count"));
  sub->add_option_function<std::string>(
         "--flash-attn",
         [](const std::string& v) {
           if (v == "off" || v == "0" || v == "disabled")
             std::fprintf(stderr,
                          "coda: note: --flash-attn %s ignored: coda's attention always runs in chunks with an online "
                          "softmax, flash attention's method\n",
                          v.c_str());
         },
         "Accepted for llama.cpp command lines (-fa [on|off|auto]); coda's attention is always flash-style")
      ->expected(0, 1)
      ->type_name("[on|off|auto]")
      ->check(CLI::IsMember({"on", "off", "auto", "1", "0", "-1", "enabled", "disabled"}));
}

}  // namespace coda::cli
