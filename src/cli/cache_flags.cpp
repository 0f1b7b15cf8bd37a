#include "cli/cache_flags.h"

#include <string>
#include <vector>

namespace coda::cli {

namespace {

void add_one(CLI::App* sub, const std::string& name, bool values, KvType& out) {
  std::string help = std::string("KV cache type for ") + (values ? "values" : "keys") +
                     ": f16 (half the memory and bandwidth of f32), q8_0 (about half of f16; queries meet q8_0 keys in " +
                     "int8 dot products)";
  std::vector<std::string> names{"f16", "f32", "q8_0"};
  if (values) {
    help += ", bf16 (the bytes of f16 with 8 significant bits; twice the multiply-adds per instruction on CPUs "
            "with AVX512_BF16)";
    names.emplace_back("bf16");
  }
  help += std::string(" or f32 (default: ") + kv_type_name(out) + ")";
  sub->add_option_function<std::string>(
         name, [&out](const std::string& s) { out = parse_kv_type(s).value_or(KvType::F16); }, help)
      ->check(CLI::IsMember(names));
}

}  // namespace

void add_cache_type_flags(CLI::App* sub, KvType& k, KvType& v) {
  add_one(sub, "--cache-type-k", false, k);
  add_one(sub, "--cache-type-v", true, v);
}

}  // namespace coda::cli
