// The detectors of degeneration that does not repeat: low-diversity garbage, script mixing,
// language drift in six languages, invented words (Hunspell dictionaries), and evidence adding up
// (a short flood after degenerate text). Each on hand-built positive and negative cases, the
// legitimate mixed-language ones included. Texts are fed word by word as the proxy feeds an
// upstream's text (no logits; a token id per distinct piece).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "guard/detectors/garbage.h"
#include "guard/dictionary.h"
#include "guard/guard.h"
#include "guard/language.h"

namespace coda {
namespace nonperiodic_tests {

const bool kHunspell = std::filesystem::exists("/usr/share/hunspell/it_IT.dic") &&
                       std::filesystem::exists("/usr/share/hunspell/fr_FR.aff");

std::vector<GuardEvent> feed(const std::string& text, const std::string& prompt = "", GuardConfig cfg = {}) {
  Guard g(cfg, {2});
  g.on_start({1}, prompt);
  std::string so_far;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of(" \n", start + 1);
    end = end == std::string::npos ? text.size() : end;
    const std::string piece = text.substr(start, end - start);
    so_far += piece;
    g.observe(static_cast<int32_t>(std::hash<std::string>{}(piece) % 100000 + 10), nullptr, so_far);
    start = end;
  }
  return g.report().events;
}

const GuardEvent* first(const std::vector<GuardEvent>& events, const std::string& type) {
  for (const auto& e : events)
    if (e.type == type) return &e;
  return nullptr;
}

std::string repeat_text(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// --- language identification ---

TEST(GuardLanguage, SixLanguagesByTheirFrequentWords) {
  const std::pair<const char*, const char*> cases[] = {
      {"en", "The file is read when the service starts, and the options in it are used for all of the users."},
      {"it",
       "Il file viene letto quando il servizio parte, e le opzioni che contiene sono usate per tutti gli utenti."},
      {"fr",
       "Le fichier est lu quand le service démarre, et les options qu'il contient sont utilisées pour tous les "
       "utilisateurs."},
      {"de",
       "Die Datei wird gelesen, wenn der Dienst startet, und die Optionen darin werden für alle Benutzer "
       "verwendet."},
      {"es",
       "El archivo se lee cuando el servicio arranca, y las opciones que contiene se usan para todos los "
       "usuarios."},
      {"pt",
       "O ficheiro é lido quando o serviço arranca, e as opções que contém são usadas para todos os "
       "utilizadores."},
  };
  for (const auto& [lang, text] : cases) EXPECT_EQ(language_profile(text).language(6, 0.5), lang) << text;
  // Too few known words: no language.
  EXPECT_EQ(language_profile("apt-get install -y nginx").language(6, 0.5), "");
  // A table has a low prose share.
  EXPECT_LT(
      language_profile("ssh 22/tcp\ntelnet 23/tcp\nsmtp 25/tcp mail\ndomain 53/tcp\nhttp 80/tcp www").prose_share(),
      0.25);
}

TEST(GuardLanguage, Scripts) {
  EXPECT_EQ(script_name(script_of(U'a')), std::string("latin"));
  EXPECT_EQ(script_name(script_of(0x4E2D)), std::string("cjk"));  // 中
  EXPECT_EQ(script_name(script_of(0x3042)), std::string("cjk"));  // あ
  EXPECT_EQ(script_name(script_of(0x0416)), std::string("cyrillic"));
  EXPECT_EQ(script_of(U'7'), -1);
  EXPECT_EQ(script_of(0x3002), -1);  // 。
  EXPECT_EQ(language_profile("Привет мир").script(), "cyrillic");
}

// --- the Hunspell reader, on a dictionary written here (expectations worked out by hand from the
// rules, as hunspell(5) defines them) ---

// Each test's own directory: ctest -j runs the tests of this file in parallel processes.
struct TinyDictionary {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("coda_test_dict_" + std::to_string(::getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ~TinyDictionary() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::shared_ptr<const Dictionary> load(const std::string& aff, const std::string& dic) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "t.aff") << aff;
    std::ofstream(dir / "t.dic") << dic;
    auto d = Dictionary::load((dir / "t.aff").string(), (dir / "t.dic").string());
    EXPECT_TRUE(d.ok());
    return d ? *d : nullptr;
  }
};

TEST(GuardDictionary, SuffixesPrefixesConditionsAndTwoLevels) {
  TinyDictionary t;
  auto d = t.load(
      "SET UTF-8\n"
      "SFX A Y 2\n"
      "SFX A y ies [^aeiou]y\n"  // fly -> flies, not play -> plaies
      "SFX A 0 s [aeiou]y\n"     // play -> plays
      "SFX B Y 1\n"
      "SFX B 0 ing/C .\n"  // walk -> walking, which takes C
      "SFX C Y 1\n"
      "SFX C 0 s .\n"  // walkings (a second suffix, through B's flags)
      "PFX R Y 1\n"
      "PFX R 0 re .\n"  // redo, and with A's cross product: replays
      "PFX N N 1\n"
      "PFX N 0 un .\n",  // no cross product: undone, not undoings
      "4\nfly/A\nplay/AR\nwalk/B\ndo/RNB\n");
  ASSERT_TRUE(d);
  for (const char* w : {"fly", "flies", "play", "plays", "walk", "walking", "walkings", "replay", "replays", "redo",
                        "undo", "doing", "redoing"})
    EXPECT_TRUE(d->known(w)) << w;
  for (const char* w : {"flys", "plaies", "walks", "unplay", "undoing", "rewalk", "flying", "wal", ""})
    EXPECT_FALSE(d->known(w)) << w;
}

TEST(GuardDictionary, LongNumericAndUtf8Flags) {
  TinyDictionary t;
  auto a = t.load("FLAG long\nSFX Aa Y 1\nSFX Aa 0 e .\n", "1\nchat/Aa\n");
  EXPECT_TRUE(a->known("chate"));
  auto n = t.load("FLAG num\nSFX 101 Y 1\nSFX 101 0 er .\n", "1\nklein/7,101\n");
  EXPECT_TRUE(n->known("kleiner"));
  EXPECT_FALSE(n->known("kleinen"));
  auto u = t.load("SET UTF-8\nFLAG UTF-8\nSFX é Y 1\nSFX é r ción ar\n", "1\nnavegar/é\n");
  EXPECT_TRUE(u->known("navegación"));
  EXPECT_FALSE(u->known("navegarción"));
}

// Malformed files load without throwing: truncated rules, an unclosed condition, an alias number far
// out of range, flags of a mode that does not fit, empty lines.
TEST(GuardDictionary, MalformedFilesAreReadWithoutThrowing) {
  TinyDictionary t;
  auto d = t.load("SET UTF-8\nAF 1\nAF A\nSFX\nSFX A\nSFX A Y\nSFX A 0 s [abc\nPFX B Y 1\nPFX B 0\nFLAG long\n",
                  "x\n\nword/99999999999999999999999999999999\nok/1\n/odd\nother/A\n\xff\xfe/\xff\n");
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->known("word"));
  EXPECT_TRUE(d->known("ok"));
  EXPECT_FALSE(d->known("zzz"));
  EXPECT_FALSE(Dictionary::load("/nonexistent.aff", "/nonexistent.dic").ok());
}

TEST(GuardDictionary, DebianDictionariesKnowInflectedForms) {
  if (!kHunspell) GTEST_SKIP() << "hunspell-it and hunspell-fr are not installed (scripts/bootstrap.sh test)";
  std::string why;
  auto it = Dictionary::for_language("/usr/share/hunspell", "it", &why);
  ASSERT_TRUE(it) << why;
  for (const char* w : {"parlavamo", "case", "della", "bellissime", "riscriverebbero", "andremo"})
    EXPECT_TRUE(it->known(w)) << w;
  for (const char* w : {"blorfato", "quanzimente", "stribolare"}) EXPECT_FALSE(it->known(w)) << w;
  auto fr = Dictionary::for_language("/usr/share/hunspell", "fr");
  ASSERT_TRUE(fr);
  for (const char* w : {"utilisées", "fichiers", "démarrera"}) EXPECT_TRUE(fr->known(w)) << w;
  EXPECT_FALSE(fr->known("chontrabuler"));
  EXPECT_FALSE(Dictionary::for_language("/nonexistent", "it", &why));
  EXPECT_NE(why.find("hunspell-it"), std::string::npos) << why;
}

// --- garbage ---

const char* kGarbage =
    "00 + 0: 0: 0: 0:00:0: // 0:00: 0: 0:00: 0: 0 0:0: //: 0:00:00: \"1: (data: 0:00:00 + 0:00 (1: 0: 0:00 // "
    "0:0: 0:00:0 + (0: 0:00 //: 0 \"0: 0:0:00 (1: // 0:00: 0 + 0:0 0:00:00 \"1:0 // 0: (0:00 0:0: + 0:00:0: 0 ";

TEST(GuardGarbage, SymbolChainsFromTheIkLlamaReport) {
  const std::string prose =
      "The model answered the first question correctly and then went on to describe the data it was given. ";
  const auto events = feed(prose + prose + kGarbage);
  const GuardEvent* e = first(events, "garbage");
  ASSERT_TRUE(e);
  EXPECT_GT(e->onset, 20);  // not in the prose
}

TEST(GuardGarbage, TablesDumpsLogsAndNumbersPass) {
  std::string hexdump, log, numbers, times;
  std::mt19937 rng(3);
  char buf[128];
  for (int line = 0; line < 30; ++line) {
    std::snprintf(buf, sizeof buf, "%06x", line * 16);
    hexdump += buf;
    for (int k = 0; k < 16; ++k) {
      std::snprintf(buf, sizeof buf, " %02x", static_cast<unsigned>(rng() % 256));
      hexdump += buf;
    }
    hexdump += "  >..@...f...<\n";
    std::snprintf(buf, sizeof buf, "2026-11-%02d %02d:%02d:%02d status installed libc6:amd64 2.36-9+deb12u%d\n",
                  line % 28 + 1, line % 24, line * 7 % 60, line * 13 % 60, line % 9);
    log += buf;
  }
  for (int k = 0; k < 120; ++k) numbers += std::to_string(static_cast<double>(rng() % 10000) / 1000.0) + ", ";
  for (int k = 0; k < 60; ++k) {
    std::snprintf(buf, sizeof buf, "%02d:%02d:%02d ", k % 24, k * 7 % 60, k * 11 % 60);
    times += buf;
  }
  for (const std::string& text : {hexdump, log, "[" + numbers + "]", times})
    EXPECT_FALSE(first(feed(text), "garbage")) << text.substr(0, 120);
  // Forms by hand: "9:", "9:9", "//", "9:", "(a:", "9:9": 4 distinct of 6 pieces; letters d,a,t,a.
  const detectors::GarbageMeasure m = detectors::measure_garbage("0: 00:0 // 1: (data: 0:0");
  EXPECT_EQ(m.pieces, 6);
  EXPECT_EQ(m.lines, 0);
  EXPECT_EQ(m.letters, 4);
  EXPECT_EQ(m.alphabet, 8);  // 0 : / 1 ( d a t (blanks are not visible)
  EXPECT_DOUBLE_EQ(m.shapes, 4.0 / 6.0);
}

// A Markdown table as Node.js's documentation writes one (doc/contributing/diagnostic-tooling-
// support-tiers.md): rules of dashes of every width and rows padded with blanks are few symbols and
// few letters, on lines longer than the garbage window.
TEST(GuardGarbage, MarkdownTablesPass) {
  const std::string table =
      "The tools are currently assigned to Tiers as follows:\n\n## Tier 1\n\n"
      "| Tool Type | Tool/API Name         | Regular Testing in Node.js CI | Integrated with Node.js | Target Tier |\n"
      "| --------- | --------------------- | ----------------------------- | ----------------------- | ----------- |\n"
      "| FFDC      | [diagnostic report][] | Yes                           | Yes                     | 1           |\n"
      "|           |                       |                               |                         |             |\n"
      "| Memory    | [V8 heap profiler][]  | No                            | Yes                     | 1           |\n"
      "| Key           | Description                                                                  "
      "                    | Example                                               |\n"
      "| ------------- | ------------------------------------------------------------------------------"
      "------------------- | ----------------------------------------------------- |\n";
  EXPECT_FALSE(first(feed(table + table), "garbage"));
  // A rule of one symbol is one form whatever its width: "|", "-", "|", "-", "|" and "a".
  const detectors::GarbageMeasure m = detectors::measure_garbage("| --- | ------------ | Yes");
  EXPECT_EQ(m.pieces, 6);
  EXPECT_DOUBLE_EQ(m.shapes, 3.0 / 6.0);
  // A table followed by garbage on lines that are not rows is judged as any other text.
  EXPECT_TRUE(first(feed(std::string("| Key | Value |\n") + kGarbage), "garbage"));
}

// --- script mixing ---

TEST(GuardScriptMixing, ForeignLettersWrittenIntoWords) {
  const std::string italian =
      "La strada era lunga e il viaggio sembrava non finire mai, ma il ragazzo continuava a camminare verso la "
      "città dove lo aspettavano i suoi amici. ";
  std::string mixed;
  const char* han[] = {"的", "是", "在", "了", "不"};
  int k = 0;
  for (size_t i = 0; i < italian.size(); ++i) {
    mixed += italian[i];
    if (std::isalpha(static_cast<unsigned char>(italian[i])) && i % 23 == 0) mixed += han[k++ % 5];
  }
  const auto events = feed(italian + italian + mixed + mixed, "Scrivi un racconto in italiano.");
  EXPECT_TRUE(first(events, "script_mixing"));
}

TEST(GuardScriptMixing, NamesQuotationsAndCommentsPass) {
  const std::string names =
      "Le città principali sono Tokyo (東京), Osaka (大阪) e Kyoto (京都), che il viaggiatore visita in "
      "primavera quando i ciliegi sono in fiore e le strade sono piene di gente. ";
  EXPECT_FALSE(first(feed(repeat_text(names, 4), "Parlami del Giappone."), "script_mixing"));
  const std::string code =
      "def parse(path):\n    # 读取配置文件并返回一个字典，其中包含所有的选项\n    with open(path) as f:\n"
      "        data = f.read()\n    # 如果文件为空，就使用默认的设置\n    if not data:\n        return {}\n"
      "    return json.loads(data)\n";
  EXPECT_FALSE(first(feed("import json\nimport os\n\n" + repeat_text(code, 4)), "script_mixing"));
}

// glibc's Abkhaz locale (localedata/locales/ab_GE): month names in Cyrillic after lines of code
// points, some written with the Latin schwa ("Жəаб"). A word mostly of the new script with a Latin
// letter in it is that script's word, not Cyrillic written into Latin words.
TEST(GuardScriptMixing, WordsOfTheNewScriptWithALatinLetterPass) {
  std::string table;
  for (int k = 0; k < 40; ++k) table += "\"<U0420><U0430><U0448><U04d9><U0430><U0440><U0430>\";/\n";
  const std::string months = "% Ажь, Жəаб, Хəажә, Мш, Лаҵ, Рашә, Ԥхынгә, Нанҳә, Цəыб, Жьҭ, Абҵ, Ԥхынҷ\n";
  EXPECT_FALSE(first(feed(table + months + table + months), "script_mixing"));
}

// --- language drift ---

const char* kFrench =
    "Le service lit son fichier de configuration au démarrage et applique les options qu'il contient à tous les "
    "utilisateurs du système. Pour modifier le comportement par défaut, il faut éditer ce fichier et redémarrer "
    "le service avec la commande indiquée dans la documentation, puis vérifier que les changements ont bien été "
    "pris en compte par le programme. ";
const char* kEnglish =
    "The service reads its configuration file when it starts and applies the options it holds to all of the "
    "users of the system. To change the default behaviour, you have to edit this file and restart the service "
    "with the command that is given in the documentation, and then check that the changes were taken into "
    "account by the program. ";

TEST(GuardDrift, FrenchToEnglishWithAndWithoutAPrompt) {
  const std::string text = repeat_text(kFrench, 3) + repeat_text(kEnglish, 4);
  for (const std::string prompt : {"Explique comment configurer le service, en français s'il te plaît.", ""}) {
    const auto events = feed(text, prompt);
    const GuardEvent* e = first(events, "language_drift");
    ASSERT_TRUE(e) << "prompt: " << prompt;
    EXPECT_EQ(e->evidence["language"], "fr");
    EXPECT_EQ(e->evidence["drifted_to"], "en");
    EXPECT_GT(e->detected_at, 150);  // not while the text is still French
  }
  // The expected language as a flag (coda scan --lang): English text held to Italian is a drift at once.
  GuardConfig cfg;
  cfg.language = "it";
  EXPECT_TRUE(first(feed(repeat_text(kEnglish, 4), "", cfg), "language_drift"));
}

TEST(GuardDrift, QuotedCommandsAndAnItalianPromptWithFewWords) {
  const std::string quoted =
      "Pour installer le paquet, lancez la commande apt-get install nginx puis systemctl enable --now nginx, "
      "et le serveur démarre tout de suite. The default configuration is in /etc/nginx. Ensuite, il suffit "
      "d'ouvrir le navigateur à l'adresse indiquée pour voir la page d'accueil du serveur. ";
  EXPECT_FALSE(first(feed(repeat_text(quoted, 6), "Comment installer nginx ?"), "language_drift"));
  // "Scrivi un racconto in 75 paragrafi numerati": too few words for the prompt to decide; the
  // output's own start sets the reference, and a switch to English is still a drift.
  const std::string italian =
      "C'era una volta un piccolo paese tra le montagne, dove gli abitanti si conoscevano tutti e passavano le "
      "sere a raccontarsi storie davanti al fuoco. Ogni anno, quando arrivava l'inverno, il paese si preparava "
      "alla grande festa della neve, che durava tre giorni e tre notti. ";
  const auto events =
      feed(repeat_text(italian, 3) + repeat_text(kEnglish, 4), "Scrivi un racconto in 75 paragrafi numerati");
  const GuardEvent* e = first(events, "language_drift");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->evidence["language"], "it");
}

// --- invented words ---

TEST(GuardInventedWords, PseudoWordsInItalianProse) {
  if (!kHunspell) GTEST_SKIP() << "hunspell-it is not installed (scripts/bootstrap.sh test)";
  const std::string italian =
      "C'era una volta un piccolo paese tra le montagne, dove gli abitanti si conoscevano tutti e passavano le "
      "sere a raccontarsi storie davanti al fuoco. Ogni anno, quando arrivava l'inverno, il paese si preparava "
      "alla grande festa della neve, che durava tre giorni e tre notti. ";
  const std::string invented =
      "e poi la montreva del fuoco si sbranvolava nelle carestine di mentasso, e gli abitoni frandavano la "
      "pelvitura con le stormine del brancolo, mentre il vistrame tordeva nella quamella della sera e la "
      "neve scrolvava sulle truppine del pangolo. ";
  const auto events = feed(repeat_text(italian, 2) + repeat_text(invented, 3), "Scrivi una storia.");
  const GuardEvent* e = first(events, "invented_words");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->evidence["language"], "it");
  EXPECT_FALSE(first(feed(repeat_text(italian, 4), "Scrivi una storia."), "invented_words"));
}

TEST(GuardInventedWords, TechnicalProseWithIdentifiersPasses) {
  if (!kHunspell) GTEST_SKIP() << "hunspell-fr is not installed (scripts/bootstrap.sh test)";
  const std::string technical =
      "Pour activer le module, ajoutez la ligne LoadModule dans le fichier httpd.conf puis relancez apachectl. "
      "Les options ssl_protocols et ssl_ciphers doivent être définies dans le bloc server, sinon nginx refuse "
      "de démarrer. La commande journalctl -u nginx affiche les erreurs, et systemctl status indique l'état du "
      "service. Les fichiers de log se trouvent dans /var/log/nginx, avec access.log et error.log. ";
  EXPECT_FALSE(first(feed(repeat_text(technical, 4), "Comment configurer nginx ?"), "invented_words"));
}

// --- evidence adds up ---

TEST(GuardEvidence, AShortFloodAfterGarbage) {
  const std::string prose =
      "The model answered the first question correctly and then went on to describe the data it was given. ";
  const std::string flood = "Hectometers Hectometers Hectometers Hectometers Hectometers ";
  const auto events = feed(prose + prose + kGarbage + flood + "and then it stopped.");
  const GuardEvent* e = first(events, "flooding");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->evidence["after"], "degenerate");
  // The same five words in clean prose are no flood (a flood needs 16 without other evidence).
  EXPECT_FALSE(first(feed(prose + prose + flood + prose), "flooding"));
}

}  // namespace nonperiodic_tests
}  // namespace coda
