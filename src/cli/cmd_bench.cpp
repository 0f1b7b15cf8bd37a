// `coda bench-model`: prefill/decode throughput and the memory-bandwidth roofline.
#include <cstdio>

#include "cli/cache_flags.h"
#include "cli/commands.h"
#include "cli/llama_compat.h"
#include "core/timer.h"
#include "engine/thread_choice.h"
#include "kernels/kernels.h"
#include "lab/bench_model.h"

namespace coda::cli {

void add_bench_model(CLI::App& app, std::vector<Command>& out) {
  struct Flags {
    std::string model;
    int threads = 0;
    BenchModelOptions opt;
    bool json = false, no_repack = false, no_warmup = false, threads_sweep = false;
    KvType ctk = KvType::F16, ctv = KvType::F16;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* sub =
      app.add_subcommand("bench-model", "Measure prefill and decode tokens/s against the bandwidth roofline");
  sub->add_option("-m,--model", f->model, "GGUF model file (default: the bundled model)");
  sub->add_option("-t,--threads", f->threads, kThreadsHelp)->check(CLI::Range(1, 256));
  sub->add_option("-p,--n-prompt", f->opt.n_prompt, "Prompt tokens for prefill")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("-n,--n-gen", f->opt.n_gen, "Decode steps")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("-r,--reps", f->opt.reps, "Repetitions (best is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  sub->add_option("-d,--depth", f->opt.depth, "Tokens of context in the cache before prefill and decode are timed")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--streams", f->opt.streams,
                  "Also time batched decode of these numbers of sequences at once, e.g. 1,4,8 "
                  "(llama-batched-bench's -npl)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  add_cache_type_flags(sub, f->ctk, f->ctv);
  add_llama_device_flags(sub);
  sub->add_flag("--no-warmup", f->no_warmup, "Skip the untimed warm-up run");
  sub->add_flag("--no-repack", f->no_repack,
                "Keep the weights in the file's layout (no 16-row repacking for the GEMM kernels)");
  sub->add_flag("--json", f->json, "Print one JSON object instead of text");
  sub->add_flag("--threads-sweep", f->threads_sweep,
                "Time prefill and decode at every thread count from 1 to -t (default: all cores), to choose -t");
  out.push_back(
      {sub, [f] {
         const std::string path = f->model.empty() ? default_model_path() : f->model;
         LoadOptions lo;
         if (f->no_repack) lo.repack = false;
         lo.kv_type_k = f->ctk;
         lo.kv_type_v = f->ctv;
         f->opt.warmup = !f->no_warmup;
         Timer load_timer;
         auto model = Model::load(path, lo);
         if (!model) return fail(model.message());
         const double load_s = load_timer.ms() / 1000;
         const RepackStats& rs = (*model)->repack_stats();
         if (f->threads_sweep) {
           // One pool per count, the same model and options: where more threads stop paying (a
           // small model's step is too short to split) and where the machine's cores run out.
           const int most = f->threads > 0 ? f->threads : default_threads();
           std::string rows;
           int best = 1;
           double best_tps = 0;
           if (!f->json) std::printf("model      %s (kernels: %s)\nthreads    prefill t/s   decode t/s   ms/token\n",
                                     path.c_str(), kernels().name);
           for (int t = 1; t <= most; ++t) {
             ThreadPool pool(t);
             auto r = bench_model(**model, pool, f->opt);
             if (!r) return fail(r.message());
             if (r->decode_tps > best_tps) best_tps = r->decode_tps, best = t;
             rows += (rows.empty() ? "" : ",") + std::string("{\"threads\":") + std::to_string(t) +
                     ",\"prefill_tps\":" + std::to_string(r->prefill_tps) + ",\"decode_tps\":" +
                     std::to_string(r->decode_tps) + "}";
             if (!f->json)
               std::printf("%7d    %11.2f  %11.2f  %9.3f\n", t, r->prefill_tps, r->decode_tps, r->decode_ms);
           }
           const ThreadChoice chosen = choose_threads((*model)->decode_weight_bytes(), most);
           if (f->json)
             std::printf(
                 "{\"model\":\"%s\",\"kernels\":\"%s\",\"sweep\":[%s],\"best_decode_threads\":%d,"
                 "\"default_threads\":%d}\n",
                 path.c_str(), kernels().name, rows.c_str(), best, chosen.threads);
           else
             std::printf("fastest decode at -t %d; without -t coda chooses %d (%s)\n", best, chosen.threads,
                         chosen.reason.c_str());
           return 0;
         }
         const ThreadChoice choice = f->threads > 0 ? ThreadChoice{f->threads, "-t"}
                                                    : choose_threads((*model)->decode_weight_bytes(), usable_cores());
         ThreadPool pool(choice.threads);
         auto r = bench_model(**model, pool, f->opt);
         if (!r) return fail(r.message());
         const double frac = r->roofline_fraction;
         std::string batched;
         for (const StreamsResult& b : r->batched)
           batched += (batched.empty() ? "" : ",") + std::string("{\"streams\":") + std::to_string(b.streams) +
                      ",\"aggregate_tps\":" + std::to_string(b.aggregate_tps) +
                      ",\"vs_decode\":" + std::to_string(b.aggregate_tps / r->decode_tps) + "}";
         std::string reps;
         for (double x : r->rep_fractions) reps += (reps.empty() ? "" : ",") + std::to_string(x).substr(0, 5);
         if (f->json) {
           std::printf(
               "{\"model\":\"%s\",\"threads\":%d,\"kernels\":\"%s\",\"n_prompt\":%lld,\"prefill_tps\":%.2f,"
               "\"n_gen\":%lld,\"decode_tps\":%.3f,\"decode_ms\":%.3f,\"bytes_per_token\":%lld,"
               "\"bandwidth_gbs\":%.2f,\"buffer_bandwidth_gbs\":%.2f,\"roofline_tps\":%.3f,\"roofline_fraction\":%.3f,"
               "\"rep_fractions\":[%s],\"depth\":%lld,\"load_s\":%.3f,\"repacked_matrices\":%d,"
               "\"repacked_mib\":%.1f,\"repack_s\":%.3f,\"cache_type_k\":\"%s\",\"cache_type_v\":\"%s\","
               "\"batched\":[%s]}\n",
               path.c_str(), pool.size(), kernels().name, static_cast<long long>(f->opt.n_prompt), r->prefill_tps,
               static_cast<long long>(f->opt.n_gen), r->decode_tps, r->decode_ms,
               static_cast<long long>(r->bytes_per_token), r->bandwidth_gbs, r->buffer_bandwidth_gbs, r->roofline_tps,
               frac, reps.c_str(), static_cast<long long>(f->opt.depth), load_s, rs.matrices,
               static_cast<double>(rs.bytes) / (1 << 20), rs.seconds, kv_type_name(f->ctk), kv_type_name(f->ctv),
               batched.c_str());
         } else {
           std::printf("model      %s\nthreads    %d (%s; kernels: %s)\n", path.c_str(), pool.size(), choice.reason.c_str(),
                       kernels().name);
           std::printf("load       %.2f s (%d matrices repacked for the GEMM kernels, %.1f MiB, in %.2f s)\n", load_s,
                       rs.matrices, static_cast<double>(rs.bytes) / (1 << 20), rs.seconds);
           if (rs.f16_as_bf16 > 0)
             std::printf(
                 "           %d F16 matrices hold bfloat16 values: multiplied as BF16 (vdpbf16ps; "
                 "CODA_BF16_GEMM=float keeps the float tile)\n",
                 rs.f16_as_bf16);
           if (f->opt.depth > 0)
             std::printf("depth      %lld tokens of context before the timed runs (KV cache: keys %s, values %s)\n",
                         static_cast<long long>(f->opt.depth), kv_type_name(f->ctk), kv_type_name(f->ctv));
           std::printf("prefill    %.2f tokens/s (%lld-token prompt)\n", r->prefill_tps,
                       static_cast<long long>(f->opt.n_prompt));
           std::printf("decode     %.2f tokens/s (%.2f ms/token)\n", r->decode_tps, r->decode_ms);
           std::printf("bandwidth  %.2f GB/s streaming the weights (%.2f GB/s on a fresh 512 MiB buffer)\n",
                       r->bandwidth_gbs, r->buffer_bandwidth_gbs);
           std::printf("roofline   %.1f MiB of weights per token / %.2f GB/s = %.2f tokens/s\n",
                       static_cast<double>(r->bytes_per_token) / (1 << 20), r->bandwidth_gbs, r->roofline_tps);
           std::printf(
               "decode is  %.1f%% of the roofline (median over repetitions, each against the bandwidth "
               "measured around it: %s)\n",
               100 * frac, reps.c_str());
           for (const StreamsResult& b : r->batched)
             std::printf("batched    %3d streams: %.2f tokens/s in all, %.2fx one stream's decode\n", b.streams,
                         b.aggregate_tps, b.aggregate_tps / r->decode_tps);
         }
         return 0;
       }});
}

}  // namespace coda::cli
