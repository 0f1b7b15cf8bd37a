#include "lab/prompts.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <random>

#include "core/strings.h"

namespace coda::lab {

namespace {

// (set, language) -> prompts. Short openings that ask for long answers, written for this project.
const std::map<std::pair<std::string, std::string>, std::vector<const char*>>& builtin() {
  static const std::map<std::pair<std::string, std::string>, std::vector<const char*>> sets = {
      {{"exam", "en"},
       {"Exam question: explain in detail the causes and consequences of the fall of the Roman Empire.\nAnswer:",
        "Exam question: describe how the water cycle works, with examples from three continents.\nAnswer:",
        "Exam question: discuss the role of the printing press in the spread of ideas in Europe.\nAnswer:",
        "Exam question: explain the theory of evolution by natural selection and the evidence for it.\nAnswer:",
        "Exam question: compare the economies of ancient Athens and ancient Sparta.\nAnswer:",
        "Exam question: explain why the seasons change, and what would happen if the Earth had no tilt.\nAnswer:"}},
      {{"exam", "it"},
       {"Domanda d'esame: spiega in dettaglio le cause e le conseguenze della caduta dell'Impero romano.\nRisposta:",
        "Domanda d'esame: descrivi il ciclo dell'acqua con esempi tratti da tre continenti.\nRisposta:",
        "Domanda d'esame: discuti il ruolo della stampa nella diffusione delle idee in Europa.\nRisposta:",
        "Domanda d'esame: spiega la teoria dell'evoluzione per selezione naturale e le prove a suo favore.\nRisposta:",
        "Domanda d'esame: confronta l'economia di Atene e quella di Sparta nell'antichità.\nRisposta:",
        "Domanda d'esame: spiega perché cambiano le stagioni e che cosa accadrebbe senza l'inclinazione "
        "terrestre.\nRisposta:"}},
      {{"exam", "fr"},
       {"Question d'examen : expliquez en détail les causes et les conséquences de la chute de l'Empire "
        "romain.\nRéponse :",
        "Question d'examen : décrivez le cycle de l'eau avec des exemples pris sur trois continents.\nRéponse :",
        "Question d'examen : discutez le rôle de l'imprimerie dans la diffusion des idées en Europe.\nRéponse :",
        "Question d'examen : expliquez la théorie de l'évolution par sélection naturelle et ses preuves.\nRéponse :",
        "Question d'examen : comparez les économies d'Athènes et de Sparte dans l'Antiquité.\nRéponse :",
        "Question d'examen : expliquez pourquoi les saisons changent et ce qui arriverait sans l'inclinaison de la "
        "Terre.\nRéponse :"}},
      {{"narrative", "en"},
       {"Write a long story in numbered paragraphs about a lighthouse keeper and a storm.\n\n1.",
        "Write a long story in numbered paragraphs about a journey across the desert.\n\n1.",
        "Write a long chronicle in numbered chapters of a small town over one hundred years.\n\n1.",
        "Write a long story in numbered paragraphs about two brothers who build a ship.\n\n1."}},
      {{"narrative", "it"},
       {"Scrivi un lungo racconto in paragrafi numerati su un guardiano del faro e una tempesta.\n\n1.",
        "Scrivi un lungo racconto in paragrafi numerati su un viaggio attraverso il deserto.\n\n1.",
        "Scrivi una lunga cronaca in capitoli numerati di un piccolo paese nell'arco di cento anni.\n\n1.",
        "Scrivi un lungo racconto in paragrafi numerati su due fratelli che costruiscono una nave.\n\n1."}},
      {{"narrative", "fr"},
       {"Écrivez une longue histoire en paragraphes numérotés sur un gardien de phare et une tempête.\n\n1.",
        "Écrivez une longue histoire en paragraphes numérotés sur un voyage à travers le désert.\n\n1.",
        "Écrivez une longue chronique en chapitres numérotés d'un petit village sur cent ans.\n\n1.",
        "Écrivez une longue histoire en paragraphes numérotés sur deux frères qui construisent un navire.\n\n1."}},
      {{"technical", "en"},
       {"Q: What does the HTTP status code 429 mean?\nA:",
        "Q: What is the difference between a process and a thread?\nA:", "Q: How many bytes are in a kibibyte?\nA:",
        "Q: What does the SQL keyword JOIN do?\nA:"}},
      {{"technical", "it"},
       {"D: Che cosa significa il codice di stato HTTP 429?\nR:",
        "D: Qual è la differenza tra un processo e un thread?\nR:", "D: Quanti byte ci sono in un kibibyte?\nR:",
        "D: Che cosa fa la parola chiave SQL JOIN?\nR:"}},
      {{"technical", "fr"},
       {"Q : Que signifie le code d'état HTTP 429 ?\nR :",
        "Q : Quelle est la différence entre un processus et un thread ?\nR :",
        "Q : Combien d'octets y a-t-il dans un kibioctet ?\nR :", "Q : Que fait le mot-clé SQL JOIN ?\nR :"}},
  };
  return sets;
}

}  // namespace

namespace {

// One prompt object of a JSONL line or a JSON array: {"prompt"} or {"messages"}, and a "group";
// or a ShareGPT conversation ({"conversations": [{"from": "human", "value"}, ...]}), whose first
// human turn (after an optional system turn) is the prompt, as vLLM's `bench serve --dataset-name
// sharegpt` takes it. `skip` comes back set (and the prompt empty) for a conversation without a
// human turn: the dataset has some, and vLLM drops them too.
Expected<BenchPrompt> read_prompt(const nlohmann::json& j, const std::string& where, bool& skip) {
  skip = false;
  if (!j.is_object()) return Error(where + "not a JSON object");
  BenchPrompt p;
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string() || j["prompt"].get<std::string>().empty())
      return Error(where + "`prompt` must be a non-empty string");
    p.prompt = j["prompt"].get<std::string>();
  } else if (j.contains("messages")) {
    if (!j["messages"].is_array() || j["messages"].empty())
      return Error(where + "`messages` must be a non-empty array of {role, content}");
    p.messages = j["messages"];
  } else if (j.contains("conversations")) {
    const auto& turns = j["conversations"];
    if (!turns.is_array()) return Error(where + "`conversations` must be an array of {from, value}");
    nlohmann::json messages = nlohmann::json::array();
    for (const auto& t : turns) {
      if (!t.is_object() || !t.contains("from") || !t["from"].is_string() || !t.contains("value") ||
          !t["value"].is_string())
        return Error(where + "a turn of `conversations` must be {\"from\": string, \"value\": string}");
      const std::string& from = t["from"].get_ref<const std::string&>();
      const std::string& value = t["value"].get_ref<const std::string&>();
      if (from == "system" && messages.empty() && !value.empty()) {
        messages.push_back({{"role", "system"}, {"content", value}});
      } else if ((from == "human" || from == "user") && !value.empty()) {
        messages.push_back({{"role", "user"}, {"content", value}});
        break;
      } else {
        break;  // the conversation does not open with a question
      }
    }
    if (messages.empty() || messages.back()["role"] != "user") {
      skip = true;
      return p;
    }
    p.messages = std::move(messages);
    p.group = "sharegpt";
  } else {
    return Error(where + "expected `prompt` (text), `messages` (chat) or ShareGPT's `conversations`");
  }
  if (j.contains("group")) {
    if (!j["group"].is_string()) return Error(where + "`group` must be a string");
    p.group = j["group"].get<std::string>();
  }
  if (p.group.empty()) p.group = "default";
  return p;
}

// Keeps at most kMaxPrompts of a stream of prompts, each equally likely (reservoir sampling with a
// fixed seed, so a file gives the same prompts every run), in the file's order. A ShareGPT dump
// holds ~90,000 conversations; a load test needs a sample, and memory stays bounded.
class Reservoir {
 public:
  void offer(BenchPrompt p) {
    ++seen_;
    if (kept_.size() < kMaxPrompts) {
      kept_.emplace_back(seen_, std::move(p));
      return;
    }
    const uint64_t slot = rng_() % seen_;
    if (slot < kMaxPrompts) kept_[slot] = {seen_, std::move(p)};
  }
  std::vector<BenchPrompt> take() {
    std::sort(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<BenchPrompt> out;
    out.reserve(kept_.size());
    for (auto& k : kept_) out.push_back(std::move(k.second));
    return out;
  }

 private:
  uint64_t seen_ = 0;
  std::mt19937_64 rng_{0x5eed};
  std::vector<std::pair<uint64_t, BenchPrompt>> kept_;
};

// A file whose first non-blank byte is '[': one JSON array of prompt objects or ShareGPT
// conversations. Parsed element by element (each is handed over and dropped as it completes), so
// a dump of hundreds of megabytes never stands in memory as a whole.
Status load_json_array(std::ifstream& in, const std::string& path, Reservoir& keep, size_t& skipped) {
  Status failed;
  size_t index = 0;
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                                   nlohmann::json& parsed) {
    if (depth != 1 || !failed.ok()) return depth != 1;
    if (event != nlohmann::json::parse_event_t::object_end && event != nlohmann::json::parse_event_t::array_end &&
        event != nlohmann::json::parse_event_t::value)
      return true;
    const std::string where = path + ": element " + std::to_string(index++) + ": ";
    bool skip = false;
    auto p = read_prompt(parsed, where, skip);
    if (!p) {
      failed = p.error();
    } else if (skip) {
      ++skipped;
    } else {
      keep.offer(std::move(*p));
    }
    return false;  // drop the element; it is kept (or not) above
  };
  try {
    auto doc = nlohmann::json::parse(in, cb);
    if (!doc.is_array() && failed.ok()) return Error(path + ": expected a JSON array of prompts");
  } catch (const nlohmann::json::parse_error& e) {
    return Error(path + ": not valid JSON near byte " + std::to_string(e.byte));
  }
  return failed;
}

}  // namespace

Expected<std::vector<BenchPrompt>> load_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("prompts: cannot open " + path);
  Reservoir keep;
  size_t skipped = 0;
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (in && first == '[') {
    in.unget();
    if (Status s = load_json_array(in, path, keep, skipped); !s.ok()) return s.error();
  } else {
    in.clear();
    in.seekg(0);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(n) + ": ";
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) return Error(where + "not a JSON object");
      bool skip = false;
      auto p = read_prompt(j, where, skip);
      if (!p) return p.error();
      if (skip)
        ++skipped;
      else
        keep.offer(std::move(*p));
    }
  }
  std::vector<BenchPrompt> out = keep.take();
  if (out.empty())
    return Error("prompts: " + path + " holds no prompts" +
                 (skipped > 0 ? " (" + std::to_string(skipped) + " conversations without a human turn)" : ""));
  return out;
}

BenchPrompt as_chat_prompt(const BenchPrompt& completion) {
  std::string text = completion.prompt;
  // The cue is the last line when it is short and ends the way a cue does ("Answer:", "R :", "1.").
  const size_t nl = text.rfind('\n');
  if (nl != std::string::npos) {
    const std::string last = text.substr(nl + 1);
    if (last.size() <= 12 && !last.empty() && (last.back() == ':' || last.back() == '.')) text.erase(nl);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  BenchPrompt p;
  p.messages = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
  p.group = completion.group;
  return p;
}

Expected<std::vector<BenchPrompt>> builtin_prompts(const std::string& sets, const std::string& languages, bool chat) {
  std::vector<std::string> names = split_list(sets), langs = split_list(languages);
  if (names.size() == 1 && names[0] == "all") names = {"exam", "narrative", "technical"};
  std::vector<BenchPrompt> out;
  for (const auto& s : names) {
    for (const auto& l : langs) {
      auto it = builtin().find({s, l});
      if (it == builtin().end())
        return Error("built-in prompts: no set '" + s + "' in '" + l +
                     "'; sets: exam, narrative, technical, all; languages: en, it, fr");
      for (const char* text : it->second) {
        BenchPrompt p{text, nullptr, s + "-" + l};
        out.push_back(chat ? as_chat_prompt(p) : p);
      }
    }
  }
  if (out.empty()) return Error("built-in prompts: no set or language given");
  return out;
}

}  // namespace coda::lab
