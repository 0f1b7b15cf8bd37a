// `coda proxy`: the guard in front of an OpenAI-compatible server (vLLM, llama.cpp, coda serve).
#include <cstdio>

#include "cli/commands.h"
#include "cli/http_flags.h"
#include "cli/reasoning_flags.h"
#include "core/strings.h"
#include "proxy/proxy_server.h"
#include "server/shutdown.h"

namespace coda::cli {

namespace {

struct ProxyFlags {
  // Exact loops, floods, symbol garbage and script mixing stop: false positives measured below 1% on
  // every legitimate kind (docs/guard-eval); the rest is observed (docs/guard.md).
  std::string guard = "stop:loop,flooding,garbage,script_mixing";
  ReasoningFlags reasoning;
  std::string upstream_budget = "enforce";
  int max_repairs = 8;
  int repair_window = 256;
  std::vector<std::string> upstreams;  // --upstream, repeated or comma-separated
  std::string affinity = "prefix";
  ApiKeyFlags api_keys;
  std::string upstream_key_file;  // --upstream-api-key-file
  proxy::ProxyOptions opts;
};

int run_proxy(ProxyFlags& f) {
  std::vector<std::string> urls;
  std::string listed;
  for (const auto& u : f.upstreams)
    for (const auto& part : split_list(u)) urls.push_back(part);
  if (urls.empty()) return fail("--upstream: give the URL of an OpenAI-compatible server");
  for (const auto& u : urls) listed += (listed.empty() ? "" : ", ") + u;
  f.opts.upstream.url = urls[0];
  f.opts.more_urls.assign(urls.begin() + 1, urls.end());
  if (f.affinity != "prefix" && f.affinity != "none")
    return fail("--upstream-affinity: '" + f.affinity + "' is not one of prefix, none");
  f.opts.prefix_affinity = f.affinity == "prefix";
  if (Status s = set_guard_policy(f.guard, f.opts.guard); !s.ok()) return fail("--guard: " + s.message());
  if (Status s = apply_reasoning_flags(f.reasoning, f.opts.guard.thinking, f.opts.effort_budgets); !s.ok())
    return fail(s.message());
  if (f.upstream_budget != "enforce" && f.upstream_budget != "forward")
    return fail("--upstream-reasoning-budget: '" + f.upstream_budget + "' is not enforce or forward");
  f.opts.forward_budget = f.upstream_budget == "forward";
  auto keys = resolve_api_keys(f.api_keys);
  if (!keys) return fail(keys.message());
  f.opts.api_keys = std::move(*keys);
  if (!f.upstream_key_file.empty()) {
    if (!f.opts.upstream.api_key.empty()) return fail("give --upstream-api-key or --upstream-api-key-file, not both");
    auto upstream_keys = read_key_file(f.upstream_key_file, "--upstream-api-key-file");
    if (!upstream_keys) return fail(upstream_keys.message());
    f.opts.upstream.api_key = upstream_keys->front();
  }
  f.opts.guard.max_repairs = f.max_repairs;
  f.opts.guard.stream_delay_tokens = f.repair_window;
  tune_allocator_for_server();
  auto server = proxy::ProxyServer::create(f.opts);
  if (!server) return fail(server.message());
  auto port = (*server)->bind();
  if (!port) return fail(port.message());
  std::fprintf(stderr,
               "coda proxy: upstream %s; guard %s; default max_tokens %lld; up to %d requests in flight; top %d "
               "logprobs asked upstream\n",
               listed.c_str(), f.guard.c_str(), static_cast<long long>(f.opts.default_max_tokens),
               f.opts.max_connections, f.opts.top_logprobs);
  print_access("coda proxy", f.opts.host, f.opts.api_keys.size());
  std::printf("coda proxy: listening on %s://%s:%d\n", f.opts.tls.enabled() ? "https" : "http", f.opts.host.c_str(),
              *port);
  std::fflush(stdout);
  {
    proxy::ProxyServer& px = **server;
    ShutdownWatch watch(
        "coda proxy", f.opts.shutdown_timeout_s, [&px](double t) { return px.drain(t); },
        "the upstream generations left were cancelled and their clients answered 503 (retry)");
    px.serve();
  }
  (*server)->stop();
  return 0;
}

}  // namespace

void add_proxy(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<ProxyFlags>();
  CLI::App* sub = app.add_subcommand(
      "proxy", "The degeneration guard in front of an OpenAI-compatible server (vLLM, llama.cpp, coda serve)");
  sub->add_option("--upstream", f->upstreams,
                  "The upstream server, http(s)://HOST:PORT[/v1] (a bare HOST:PORT means http://); several (repeated "
                  "or comma-separated) for replicas of "
                  "one model (--upstream-affinity picks one per request; one that cannot be reached is passed over)")
      ->required();
  sub->add_option("--upstream-affinity", f->affinity,
                  "prefix: requests that begin alike (a conversation's turns) go to the same replica, for its prefix "
                  "cache, unless it is busier than the rest; none: the least busy")
      ->capture_default_str();
  sub->add_option("--upstream-fail-timeout", f->opts.upstream_fail_timeout_s,
                  "Seconds an upstream that refused a connection is passed over (while another is up)")
      ->capture_default_str();
  sub->add_option("--upstream-api-key", f->opts.upstream.api_key, "Sent upstream as 'Authorization: Bearer KEY'");
  sub->add_option("--upstream-api-key-file", f->upstream_key_file,
                  "Read --upstream-api-key from a file (its first key line), kept out of the process list");
  sub->add_option("--upstream-ca-cert", f->opts.upstream.ca_cert,
                  "https upstreams: PEM file of the certificate authorities to trust (a private CA or a self-signed "
                  "server)")
      ->check(CLI::ExistingFile);
  sub->add_option("--host", f->opts.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", f->opts.port, "Port (0: any free port, printed on stdout)")->capture_default_str();
  add_api_key_flags(sub, f->api_keys);
  sub->add_option("--ssl-certfile,--ssl-cert-file", f->opts.tls.cert,
                  "Serve https with this PEM certificate (chain); with --ssl-keyfile")
      ->check(CLI::ExistingFile);
  sub->add_option("--ssl-keyfile,--ssl-key-file", f->opts.tls.key, "The PEM private key of --ssl-certfile")
      ->check(CLI::ExistingFile);
  sub->add_option(
         "--guard", f->guard,
         "Guard policy: observe, stop or repair, optionally for some detectors (stop:loop,flooding; docs/guard.md)")
      ->capture_default_str();
  sub->add_flag("--finish-reason-compat", f->opts.finish_reason_compat,
                "Report the guard's finish reasons (repetition, degenerate) as 'stop' for strict clients");
  sub->add_option("--default-max-tokens", f->opts.default_max_tokens, "max_tokens for requests that name none")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-connections", f->opts.max_connections, "Requests in flight before 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub->add_option("--shutdown-timeout", f->opts.shutdown_timeout_s,
                  "On SIGTERM or SIGINT: seconds the requests in flight get to finish before their upstream "
                  "generations are cancelled and they are answered 503 (a second signal exits at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_flag("--metrics-auth", f->opts.metrics_auth,
                "Put GET /metrics behind --api-key too (open by default, as vLLM's)");
  add_reasoning_flags(sub, &f->reasoning, false);
  sub->add_option("--upstream-reasoning-budget", f->upstream_budget,
                  "Thinking budgets: enforce (the proxy closes the thinking and asks the upstream for the answer) or "
                  "forward (the budget fields go to an upstream that honours them)")
      ->capture_default_str();
  sub->add_option("--max-repairs", f->max_repairs, "Repairs per request before the guard stops it")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  sub->add_option("--repair-window", f->repair_window, "Tokens held back from the client under --guard repair")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  sub->add_option("--upstream-top-logprobs", f->opts.top_logprobs,
                  "top_logprobs asked of the upstream for the guard's signals (0: guard on text alone)")
      ->capture_default_str()
      ->check(CLI::Range(0, 20));
  sub->add_option("--upstream-timeout", f->opts.upstream.read_timeout_s,
                  "Seconds the upstream may stay silent before the request fails with 504")
      ->capture_default_str();
  sub->add_option("--connect-timeout", f->opts.upstream.connect_timeout_s, "Seconds to connect to the upstream")
      ->capture_default_str();
  sub->add_option_function<double>(
         "--responses-store", [f](double mb) { f->opts.responses_store_bytes = static_cast<size_t>(mb * 1024 * 1024); },
         "Memory in MiB for the conversations /v1/responses keeps for previous_response_id, least recently used "
         "dropped first (default 64; 0: keep none and refuse previous_response_id)")
      ->check(CLI::Range(0.0, 1048576.0));
  sub->add_option("--max-body", f->opts.max_body_bytes, "Largest request body in bytes (413 beyond)")
      ->capture_default_str();
  sub->add_option("--read-timeout", f->opts.read_timeout_s,
                  "Seconds a client may take to send its request (408 for a body cut short)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  add_request_limit_flags(sub, f->opts.limits);
  out.push_back({sub, [f] { return run_proxy(*f); }});
}

}  // namespace coda::cli
