// `coda scan`: the degeneration guard over texts that were already written: logged completions
// from any server, transcripts, or a corpus of legitimate repetition to check the guard against.
// Each text is tokenized with a real vocabulary (or cut into the proxy's word pieces) and fed to
// the guard token by token, as if it were being generated; there are no logits, so the detectors
// that need a distribution stay quiet, as in the proxy without logprobs.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "guard/guard.h"
#include "proxy/stream_guard.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/vocab.h"

namespace coda::cli {

namespace {

using json = nlohmann::ordered_json;

struct ScanFlags {
  std::vector<std::string> inputs;
  std::string vocab;  // GGUF or tokenizer.json; empty: the bundled model's
  bool pieces = false;
  std::string guard = "observe";
  bool json_out = false;
  bool check = false;
  bool detectors = false;
  GuardConfig config;
};

struct ScanText {
  std::string source;  // file or file:line
  std::string id, label, prompt, text;
  std::optional<std::vector<int32_t>> tokens;  // the generated ids, when the record has them
};

// A vocabulary from a GGUF file (a model or vocab-only) or a Hugging Face tokenizer.json (written
// to a temporary GGUF first: the mapping keeps the data after the file is removed).
Expected<Vocab> load_vocab(const std::string& path) {
  std::string gguf_path = path;
  std::string temp;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    auto spec = import_hf_tokenizer(path);
    if (!spec) return spec.error();
    GgufWriter w;
    spec->write(w);
    temp =
        (std::filesystem::temp_directory_path() / ("coda_scan_vocab." + std::to_string(::getpid()) + ".gguf")).string();
    if (Status s = w.write(temp); !s.ok()) return s.error();
    gguf_path = temp;
  }
  auto f = GgufFile::open(gguf_path);
  if (!temp.empty()) std::filesystem::remove(temp);
  if (!f) return f.error();
  return Vocab::from_gguf(*f);
}

// The text of one JSON Lines record: "text", "completion", "output", or an OpenAI response's
// first choice (completions or chat). A chat message's reasoning (vLLM's reasoning_content, or
// reasoning) comes first, as the model wrote it: a model that loops while it thinks may never
// reach its content (null).
std::optional<std::string> record_text(const json& j) {
  for (const char* k : {"text", "completion", "output"})
    if (j.contains(k) && j[k].is_string()) return j[k].get<std::string>();
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& c = j["choices"][0];
    if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
    if (c.contains("message") && c["message"].is_object()) {
      const json& m = c["message"];
      std::optional<std::string> out;
      for (const char* k : {"reasoning_content", "reasoning", "content"})
        if (m.contains(k) && m[k].is_string()) out = out.value_or("") + m[k].get<std::string>();
      return out;
    }
  }
  return std::nullopt;
}

std::string string_field(const json& j, const char* key) {
  if (!j.contains(key)) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

Status read_inputs(const std::vector<std::string>& inputs, std::vector<ScanText>& out) {
  for (const auto& path : inputs) {
    std::ifstream file;
    if (path != "-") {
      file.open(path, std::ios::binary);
      if (!file) return Error(path + ": cannot open");
    }
    std::istream& in = path == "-" ? std::cin : file;
    const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    if (!jsonl) {
      std::stringstream ss;
      ss << in.rdbuf();
      out.push_back({path, "", "", "", ss.str(), std::nullopt});
      continue;
    }
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(n);
      auto j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return Error(where + ": not a JSON object");
      ScanText t{where, string_field(j, "id"), string_field(j, "label"), string_field(j, "prompt"), "", std::nullopt};
      if (j.contains("tokens")) {
        if (!j["tokens"].is_array()) return Error(where + ": tokens: expected an array of token ids");
        t.tokens.emplace();
        for (const auto& id : j["tokens"]) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            return Error(where + ": tokens: expected an array of token ids");
          t.tokens->push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      } else {
        auto text = record_text(j);
        if (!text)
          return Error(where +
                       ": no text (expected \"text\", \"completion\", \"output\", \"tokens\" or an OpenAI response)");
        t.text = std::move(*text);
      }
      out.push_back(std::move(t));
    }
  }
  return Status();
}

// Token ids as given, or the text encoded; ids outside the vocabulary are an error.
Expected<std::vector<int32_t>> token_ids(const Vocab& vocab, const ScanText& t) {
  if (!t.tokens) return vocab.encode(t.text, false);
  for (int32_t id : *t.tokens)
    if (id >= vocab.size())
      return Error(t.source + ": token id " + std::to_string(id) + " is outside the vocabulary (" +
                   std::to_string(vocab.size()) + " tokens); give the model's vocabulary with --vocab");
  return *t.tokens;
}

// The guard's report, and the bytes of text after each unit (where each event was seen).
struct Scanned {
  GuardReport report;
  std::vector<size_t> ends;
};

Expected<Scanned> scan_tokens(const Vocab& vocab, const GuardConfig& cfg, const ScanText& t) {
  auto ids = token_ids(vocab, t);
  if (!ids) return ids.error();
  Guard guard(cfg, {});
  guard.on_start({}, t.prompt);
  StreamDecoder dec(vocab, !t.tokens.has_value());
  std::string text;
  std::vector<size_t> ends;
  for (int32_t id : *ids) {
    text += dec.push(id);
    ends.push_back(text.size());
    if (guard.observe(id, nullptr, text).stop) break;
  }
  return Scanned{guard.report(), std::move(ends)};
}

Scanned scan_pieces(const GuardConfig& cfg, const ScanText& t) {
  proxy::StreamGuard guard(cfg, t.prompt);
  if (!guard.feed(t.text, {}).stop) guard.finish();
  Scanned out{guard.report(), {}};
  for (size_t u = 1; u <= guard.units(); ++u) out.ends.push_back(guard.text_end(u));
  return out;
}

// The guard's detector registry: what `--guard stop:TYPE` accepts, which family each belongs to
// (the Prometheus rules and the lab read the loop family), what a stop for it says.
int list_detectors(bool as_json) {
  const json reg = detector_registry_json();
  if (as_json) {
    std::printf("%s\n", reg.dump(2).c_str());
    return 0;
  }
  std::printf("%-18s %-11s %-12s %-15s %s\n", "detector", "family", "finish", "needs", "what");
  for (const auto& d : reg) {
    std::string needs;
    for (const auto& x : d["needs"]) needs += (needs.empty() ? "" : ",") + x.get<std::string>();
    std::printf("%-18s %-11s %-12s %-15s %s\n", d["name"].get<std::string>().c_str(),
                d["family"].get<std::string>().c_str(), d["finish_reason"].get<std::string>().c_str(), needs.c_str(),
                d["what"].get<std::string>().c_str());
  }
  return 0;
}

int scan(ScanFlags& f) {
  if (f.detectors) return list_detectors(f.json_out);
  if (f.inputs.empty()) return fail("scan: give text or .jsonl files to scan (- reads standard input)");
  if (Status s = set_guard_policy(f.guard, f.config); !s.ok()) return fail("--guard: " + s.message());
  if (f.config.policy == GuardPolicy::Repair) return fail("--guard: repair needs a generator; scan observes or stops");
  f.config.runaway_tokens = 0;  // a written text's length is not the guard's business here
  std::vector<ScanText> texts;
  if (Status s = read_inputs(f.inputs, texts); !s.ok()) return fail(s.message());
  std::optional<Vocab> vocab;
  if (!f.pieces) {
    auto v = load_vocab(f.vocab.empty() ? default_model_path() : f.vocab);
    if (!v) return fail((f.vocab.empty() ? default_model_path() : f.vocab) + ": " + v.message());
    vocab = std::move(*v);
  }
  size_t flagged = 0;
  for (auto& t : texts) {
    if (f.pieces && t.tokens) return fail(t.source + ": token ids need a vocabulary to decode; drop --pieces");
    Expected<Scanned> scanned =
        f.pieces ? Expected<Scanned>(scan_pieces(f.config, t)) : scan_tokens(*vocab, f.config, t);
    if (!scanned) return fail(scanned.message());
    const GuardReport& r = scanned->report;
    flagged += !r.events.empty();
    if (f.json_out) {
      json line;
      line["source"] = t.source;
      if (!t.id.empty()) line["id"] = t.id;
      if (!t.label.empty()) line["label"] = t.label;
      line["units"] = f.pieces ? "pieces" : "tokens";
      line["tokens"] = r.tokens;
      line["flagged"] = !r.events.empty();
      line["events"] = r.to_json()["events"];
      // Where in the text each event was seen: bytes of text up to its detecting unit.
      for (size_t k = 0; k < r.events.size(); ++k) {
        const auto at = static_cast<size_t>(r.events[k].detected_at);
        if (at < scanned->ends.size()) line["events"][k]["at_byte"] = scanned->ends[at];
      }
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%-40s %6lld %s", t.source.c_str(), static_cast<long long>(r.tokens), f.pieces ? "pieces" : "tokens");
      for (const auto& e : r.events)
        std::printf("  %s at %lld (onset %lld%s)", e.type.c_str(), static_cast<long long>(e.detected_at),
                    static_cast<long long>(e.onset),
                    e.evidence.contains("period") ? (", period " + e.evidence["period"].dump()).c_str() : "");
      std::printf("%s\n", r.events.empty() ? "  ok" : "");
    }
  }
  std::fprintf(stderr, "coda scan: %zu texts, %zu flagged (guard %s, on %s)\n", texts.size(), flagged,
               guard_policy_spec(f.config).c_str(), f.pieces ? "word pieces" : "tokens");
  return f.check && flagged > 0 ? 2 : 0;
}

}  // namespace

void add_scan(CLI::App& app, std::vector<Command>& out) {
  auto f = std::make_shared<ScanFlags>();
  CLI::App* sub = app.add_subcommand(
      "scan", "Run the degeneration guard over written texts (logged completions, transcripts, corpora)");
  sub->add_option("inputs", f->inputs,
                  "Text files (one text each) or .jsonl files ({\"text\"|\"completion\"|OpenAI response, \"prompt\", "
                  "\"id\", \"label\"} per line); - reads standard input");
  sub->add_option("--vocab", f->vocab,
                  "Tokenize with this GGUF (a model or vocab-only) or HF tokenizer.json (default: the bundled model)");
  sub->add_flag("--pieces", f->pieces, "Cut the text into word pieces, as coda proxy does without logprobs");
  sub->add_option("--guard", f->guard,
                  "observe (every event) or stop (the scan of a text ends at its first event), optionally for some "
                  "detectors (stop:loop,flooding)")
      ->capture_default_str();
  // The loop detectors' thresholds (GuardConfig; docs/guard.md), to see what a setting would flag.
  GuardConfig& c = f->config;
  // The detectors of degeneration that does not repeat (docs/guard.md#not-a-loop).
  sub->add_option("--lang", c.language,
                  "The language the texts should be in: en, it, fr, de, es or pt (default: each text's prompt's, "
                  "else its own start's)")
      ->check(CLI::IsMember(guard_languages()));
  sub->add_option("--dictionaries", c.dictionary_dir,
                  "Hunspell dictionaries for the invented-words detector (Debian's hunspell-* packages)")
      ->capture_default_str();
  sub->add_option("--drift-window", c.drift_window_chars, "Language drift: bytes of recent text (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--drift-checks", c.drift_checks, "Language drift: checks in a row (16 tokens apart)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--mix-min-share", c.mix_min_share,
                  "Script mixing: share of recent letters in a script the text did not use (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--garbage-window", c.garbage_window_chars, "Garbage: bytes of recent text (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--invented-window", c.invented_window_words, "Invented words: words of recent prose (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  sub->add_option("--invented-max-unknown", c.invented_max_unknown,
                  "Invented words: share of distinct words no dictionary knows")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--flood-min-run", c.flood_min_run, "Flooding: one token repeated this many times")
      ->capture_default_str();
  sub->add_option("--loop-min-repeats", c.loop_min_repeats, "Exact loop: copies of the period")->capture_default_str();
  sub->add_option("--loop-min-span", c.loop_min_span, "Exact loop: tokens covered")->capture_default_str();
  sub->add_option("--loop-long-period", c.loop_long_period, "Exact loop: periods this long need more copies")
      ->capture_default_str();
  sub->add_option("--loop-long-min-repeats", c.loop_long_min_repeats, "Exact loop: copies of a long period")
      ->capture_default_str();
  sub->add_option("--structural-min-span", c.structural_min_span,
                  "Loops of text without letters or digits (separators, table rules): tokens covered")
      ->capture_default_str();
  sub->add_option("--near-min-match", c.near_min_match, "Near loop: share of positions that repeat")
      ->capture_default_str();
  sub->add_option("--near-min-repeats", c.near_min_repeats, "Near loop: periods")->capture_default_str();
  sub->add_option("--near-min-span", c.near_min_span, "Near loop: tokens covered")->capture_default_str();
  sub->add_option("--near-line-min-match", c.near_line_min_match, "Near loop across line breaks: share that repeats")
      ->capture_default_str();
  sub->add_option("--near-line-min-repeats", c.near_line_min_repeats, "Near loop across line breaks: periods")
      ->capture_default_str();
  sub->add_option("--phrase-max-distinct", c.phrase_max_distinct,
                  "Phrase loop: distinct 3-grams below this share of the window (0: off)")
      ->capture_default_str();
  sub->add_option("--near-words-min", c.near_words_min, "Near loop as words: shortest unit in words")
      ->capture_default_str();
  sub->add_option("--near-words-max", c.near_words_max, "Near loop as words: longest unit in words (0: off)")
      ->capture_default_str();
  sub->add_option("--near-words-similarity", c.near_words_similarity,
                  "Near loop as words: share of the unit each copy keeps (longest common subsequence)")
      ->capture_default_str();
  sub->add_option("--near-words-distinct", c.near_words_distinct,
                  "Near loop as words: distinct matched words, as a share of the unit")
      ->capture_default_str();
  sub->add_option("--near-words-max-novel", c.near_words_max_novel,
                  "Near loop as words: most words of the last copy that are new to the text, as a share of the unit")
      ->capture_default_str();
  sub->add_option("--near-words-copies", c.near_words_copies, "Near loop as words: copies that must match")
      ->capture_default_str();
  sub->add_option("--near-words-long", c.near_words_long,
                  "Near loop as words: units of this many words (up to 120) need --near-words-long-copies (0: none)")
      ->capture_default_str();
  sub->add_option("--near-words-long-copies", c.near_words_long_copies,
                  "Near loop as words: copies that must match for a long unit")
      ->capture_default_str();
  sub->add_option("--near-words-line-words", c.near_words_line_words,
                  "Near loop as words: units with fewer words a line need --near-words-line-copies (0: none)")
      ->capture_default_str();
  sub->add_option("--near-words-line-copies", c.near_words_line_copies,
                  "Near loop as words: copies that must match for a unit of short lines")
      ->capture_default_str();
  sub->add_option("--near-words-union", c.near_words_union,
                  "Near loop as words: share of a copy matched by either of the two copies before it (0: off)")
      ->capture_default_str();
  sub->add_option("--block-third-copy", c.block_third_copy,
                  "Block loops beyond the longest period: tokens of a third copy (0: off)")
      ->capture_default_str();
  sub->add_option("--phrase-window", c.phrase_window, "Phrase loop: window in tokens")->capture_default_str();
  sub->add_option("--phrase-sentence-run", c.phrase_sentence_run,
                  "Phrase loop: sentences in a row, each written twice before, that make a loop (0: off)")
      ->capture_default_str();
  sub->add_flag("--json", f->json_out, "One JSON object per text: source, id, label, tokens, flagged, events");
  sub->add_flag("--detectors", f->detectors,
                "List the guard's detectors (name, family, finish reason, what each needs) and exit; with --json, as "
                "JSON");
  sub->add_flag("--check", f->check, "Exit with status 2 when any text is flagged");
  out.push_back({sub, [f] { return scan(*f); }});
}

}  // namespace coda::cli
