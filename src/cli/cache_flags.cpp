#include "cli/cache_flags.h"

#include <string>

namespace coda::cli {

namespace {

void add_one(CLI::App* sub, const std::string& name, const std::string& what, KvType& out) {
  sub->add_option_function<std::string>(
         name, [&out](const std::string& s) { out = parse_kv_type(s).value_or(KvType::F16); },
         "KV cache type for " + what + ": f16 (half the memory and bandwidth of f32), q8_0 (about half of f16; " +
             "queries meet q8_0 keys in int8 dot products) or f32 (default: " + kv_type_name(out) + ")")
      ->check(CLI::IsMember({"f16", "f32", "q8_0"}));
}

}  // namespace

void add_cache_type_flags(CLI::App* sub, KvType& k, KvType& v) {
  add_one(sub, "--cache-type-k", "keys", k);
  add_one(sub, "--cache-type-v", "values", v);
}

}  // namespace coda::cli
