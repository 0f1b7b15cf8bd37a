// The flags `coda bench` and `coda tune` share to choose what they measure: a URL (any
// OpenAI-compatible server, through the shared client) or a GGUF file run in this process
// (through the same scheduler as `coda serve`), and the target built from them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/generator.h"
#include "lab/target.h"

namespace coda::cli {

struct TargetFlags {
  std::string url, model_name, api_key, model_file, ca_cert;
  double timeout_s = 600;  // longest silence from the server (a hung upstream)
  int threads = 0;
  int64_t ctx = 0;
  KvType ctk = KvType::F16, ctv = KvType::F16;
  size_t max_num_seqs = 8;
  std::string guard = "observe";
};

void add_target_flags(CLI::App* app, TargetFlags& f);
// The flags of the coherence threshold that `coda threshold` and `coda diagnose` share.
void add_coherence_flags(CLI::App* app, double& quantile, double& margin, int& max_concurrency, int& top_logprobs);

// The target and what it owns (the model, when in-process).
struct BuiltTarget {
  LoadedGenerator loaded;  // empty for a URL
  std::unique_ptr<lab::Target> target;
};
Expected<BuiltTarget> make_target(const TargetFlags& f);

}  // namespace coda::cli
