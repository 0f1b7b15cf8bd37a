#!/usr/bin/python3
"""Writes the guard's evaluation corpora: texts that repeat legitimately, and texts that loop.

tests/data/guard/legit.jsonl: text that a model is asked for and that repeats by nature: lists,
tables, code, poetry refrains, legal boilerplate, numbered steps, changelogs, logs, data. None of it
is degenerate, so every loop-family event the guard reports on it is a false positive.

tests/data/guard/loops.jsonl: the shapes of loops seen in the field, each after a normal opening:
one token flooding, a sentence repeated word for word, a sentence repeated with a counter or a few
words changed, a paragraph or a block of code repeated many times. Every text loops, so each one
the guard misses lowers its recall.

Both are generated from templates with a fixed seed (the same files every run), in English, Italian
and French where the category has prose. Usage: /usr/bin/python3 bench/guard_corpus.py [OUT_DIR]
"""
import json
import os
import random
import sys

R = random.Random(20261123)

NAMES = ["Alice", "Bruno", "Chiara", "David", "Elena", "Farid", "Giulia", "Hugo", "Irene", "Jonas", "Karim",
         "Laura", "Marco", "Nadia", "Oscar", "Paola", "Quentin", "Rosa", "Sami", "Teresa"]
CITIES = ["Milano", "Lyon", "Boston", "Torino", "Nantes", "Denver", "Napoli", "Lille", "Austin", "Genova"]
ITEMS = ["apples", "bread", "milk", "eggs", "rice", "coffee", "tomatoes", "onions", "cheese", "butter", "flour",
         "sugar", "lemons", "pasta", "olive oil", "yogurt", "carrots", "garlic", "salt", "tea"]
ITEMS_IT = ["mele", "pane", "latte", "uova", "riso", "caffè", "pomodori", "cipolle", "formaggio", "burro",
            "farina", "zucchero", "limoni", "pasta", "olio", "yogurt", "carote", "aglio", "sale", "tè"]
ITEMS_FR = ["pommes", "pain", "lait", "œufs", "riz", "café", "tomates", "oignons", "fromage", "beurre", "farine",
            "sucre", "citrons", "pâtes", "huile", "yaourt", "carottes", "ail", "sel", "thé"]


def pick(xs, k):
    return R.sample(xs, k)


# --- lists -------------------------------------------------------------------------------------

def shopping_list():
    lang = R.choice(["en", "it", "fr"])
    items = {"en": ITEMS, "it": ITEMS_IT, "fr": ITEMS_FR}[lang]
    head = {"en": "Here is the shopping list for the week:", "it": "Ecco la lista della spesa per la settimana:",
            "fr": "Voici la liste de courses de la semaine :"}[lang]
    bullet = R.choice(["- ", "* ", "- [ ] ", "• "])
    lines = [f"{bullet}{R.randint(1, 4)} {x}" if R.random() < 0.5 else f"{bullet}{x}" for x in pick(items, R.randint(8, 16))]
    return head + "\n\n" + "\n".join(lines) + "\n"


def todo_list():
    tasks = ["Review the pull request", "Update the dependencies", "Write the release notes", "Fix the flaky test",
             "Reply to the customer", "Book the meeting room", "Rotate the API keys", "Back up the database",
             "Renew the TLS certificate", "Clean up old branches", "Profile the slow endpoint", "Plan the sprint",
             "Archive last quarter's logs", "Update the on-call rota", "Check the disk usage alerts"]
    n = R.randint(6, 12)
    out = ["TODO for " + R.choice(["Monday", "Tuesday", "this week", "the release"]) + ":", ""]
    for t in pick(tasks, n):
        out.append(f"- [{'x' if R.random() < 0.3 else ' '}] {t}")
    return "\n".join(out) + "\n"


def yes_no_checklist():
    checks = ["Power cable connected", "Network link up", "Fans spinning", "Firmware up to date", "Disks detected",
              "RAID healthy", "BMC reachable", "Clock synchronised", "Labels applied", "Rack position recorded",
              "Serial number noted", "Warranty registered"]
    n = R.randint(8, 12)
    return "Server intake checklist\n\n" + "\n".join(f"[OK] {c}" for c in checks[:n]) + "\n\nAll checks passed.\n"


def name_roll():
    out = ["Attendance, " + R.choice(["morning", "afternoon"]) + " session:", ""]
    for nm in pick(NAMES, R.randint(10, 18)):
        out.append(f"{nm}: present" if R.random() < 0.85 else f"{nm}: absent")
    return "\n".join(out) + "\n"


# --- tables ------------------------------------------------------------------------------------

def markdown_table_numbers():
    cols = R.choice([["Month", "Revenue", "Cost", "Margin"], ["Quarter", "Users", "Churn", "NPS"],
                     ["Week", "Orders", "Returns", "Rate"]])
    n = R.randint(8, 14)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for i in range(1, n + 1):
        a = R.randint(100, 999)
        b = R.randint(10, 99)
        out.append(f"| {i} | {a} | {b} | {round(100 * b / a, 1)}% |")
    return "Here are the figures:\n\n" + "\n".join(out) + "\n"


def markdown_table_flags():
    feats = ["Streaming", "Tool calls", "JSON mode", "Logprobs", "Prefix caching", "Speculative decoding",
             "LoRA", "Vision", "Batching", "Quantization", "Metrics", "Guard"]
    engines = ["A", "B", "C"]
    out = ["| Feature | " + " | ".join(f"Engine {e}" for e in engines) + " |", "|---|" + "---|" * len(engines)]
    for f in pick(feats, R.randint(8, 12)):
        out.append(f"| {f} | " + " | ".join(R.choice(["yes", "yes", "yes", "no"]) for _ in engines) + " |")
    return "Feature comparison:\n\n" + "\n".join(out) + "\n"


def blank_form_table():
    cols = R.choice([["Date", "Item", "Qty", "Signature"], ["Name", "Room", "Time in", "Time out"]])
    n = R.randint(5, 8)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _ in range(n):
        out.append("|" + "   |" * len(cols))
    return "Printable log sheet (fill in by hand):\n\n" + "\n".join(out) + "\n"


def csv_data():
    out = ["id,city,status,temperature"]
    for i in range(1, R.randint(15, 30)):
        out.append(f"{i},{R.choice(CITIES)},{R.choice(['ok', 'ok', 'ok', 'warn'])},{R.randint(-5, 35)}")
    return "```csv\n" + "\n".join(out) + "\n```\n"


def times_table():
    k = R.randint(2, 12)
    lang = R.choice(["en", "it", "fr"])
    word = {"en": "times", "it": "per", "fr": "fois"}[lang]
    return "\n".join(f"{k} {word} {i} = {k * i}" for i in range(1, 13)) + "\n"


def multiplication_grid():
    n = R.randint(6, 10)
    rows = ["    " + "".join(f"{j:4d}" for j in range(1, n + 1))]
    for i in range(1, n + 1):
        rows.append(f"{i:4d}" + "".join(f"{i * j:4d}" for j in range(1, n + 1)))
    return "```\n" + "\n".join(rows) + "\n```\n"


# --- code --------------------------------------------------------------------------------------

def c_switch():
    ops = pick(["ADD", "SUB", "MUL", "DIV", "MOD", "AND", "OR", "XOR", "SHL", "SHR", "NEG", "NOT"], R.randint(6, 10))
    out = ["switch (op) {"]
    for o in ops:
        out += [f"  case OP_{o}:", f"    return eval_{o.lower()}(a, b);"]
    out += ["  default:", "    return ERR_UNKNOWN_OP;", "}"]
    return "```c\n" + "\n".join(out) + "\n```\n"


def zero_table():
    n = R.choice([16, 24, 32])
    per_line = 8
    rows = []
    for i in range(0, n, per_line):
        rows.append("    " + ", ".join("0" if R.random() < 0.85 else str(R.randint(1, 255)) for _ in range(per_line)) + ",")
    return "```c\nstatic const uint8_t kTable[" + str(n) + "] = {\n" + "\n".join(rows) + "\n};\n```\n"


def python_asserts():
    fn = R.choice(["parse_size", "clamp", "normalize", "to_snake"])
    out = [f"def test_{fn}():"]
    for i in range(R.randint(6, 10)):
        a = R.randint(0, 500)
        out.append(f"    assert {fn}({a}) == {a * 2}")
    return "```python\n" + "\n".join(out) + "\n```\n"


def struct_array():
    out = ["static const struct Option kOptions[] = {"]
    opts = ["verbose", "quiet", "threads", "output", "input", "format", "level", "timeout", "retries", "color"]
    for o in pick(opts, R.randint(6, 10)):
        out.append(f'    {{"{o}", OPT_{o.upper()}, required_argument, NULL}},')
    out.append("    {NULL, 0, 0, NULL},")
    out.append("};")
    return "```c\n" + "\n".join(out) + "\n```\n"


def html_list():
    out = ['<ul class="menu">']
    for page in pick(["Home", "About", "Blog", "Docs", "Pricing", "Contact", "Careers", "Status", "Support", "Login"],
                     R.randint(6, 9)):
        out.append(f'  <li class="menu-item"><a href="/{page.lower()}">{page}</a></li>')
    out.append("</ul>")
    return "```html\n" + "\n".join(out) + "\n```\n"


def sql_inserts():
    out = []
    for i in range(1, R.randint(8, 14)):
        out.append(f"INSERT INTO users (id, name, city) VALUES ({i}, '{R.choice(NAMES)}', '{R.choice(CITIES)}');")
    return "```sql\n" + "\n".join(out) + "\n```\n"


def json_records():
    recs = []
    for i in range(1, R.randint(5, 9)):
        recs.append('  {"id": %d, "name": "%s", "active": %s, "roles": ["user"]}' %
                    (i, R.choice(NAMES), R.choice(["true", "true", "false"])))
    return "```json\n[\n" + ",\n".join(recs) + "\n]\n```\n"


def yaml_services():
    out = ["services:"]
    for s in pick(["api", "worker", "scheduler", "cache", "db", "proxy", "metrics"], R.randint(4, 6)):
        out += [f"  {s}:", f"    image: example/{s}:1.4.2", "    restart: unless-stopped", "    networks:",
                "      - backend"]
    return "```yaml\n" + "\n".join(out) + "\n```\n"


def getters():
    fields = pick(["name", "age", "email", "city", "phone", "score", "level", "token"], R.randint(4, 7))
    out = ["class Person {", " public:"]
    for f in fields:
        out.append(f"  const std::string& {f}() const {{ return {f}_; }}")
    for f in fields:
        out.append(f"  void set_{f}(std::string v) {{ {f}_ = std::move(v); }}")
    out.append(" private:")
    for f in fields:
        out.append(f"  std::string {f}_;")
    out.append("};")
    return "```cpp\n" + "\n".join(out) + "\n```\n"


def closing_braces():
    depth = R.randint(4, 7)
    out = []
    for d in range(depth):
        out.append("  " * d + f"if (level{d} > 0) {{")
    out.append("  " * depth + "visit();")
    for d in reversed(range(depth)):
        out.append("  " * d + "}")
    return "```c\n" + "\n".join(out) + "\n```\n"


def separator_banner():
    w = R.choice([40, 60, 80])
    ch = R.choice(["=", "-", "*", "#"])
    title = R.choice(["BUILD REPORT", "TEST SUMMARY", "RELEASE 2.4.0", "DEPLOYMENT LOG"])
    return f"{ch * w}\n{title.center(w)}\n{ch * w}\n\nAll {R.randint(10, 300)} targets built.\n{ch * w}\n"


# --- poetry and songs --------------------------------------------------------------------------

REFRAINS = [
    ("en", "Sing low, sing slow, the river knows the way."),
    ("en", "And the lamps burn on, and the lamps burn on."),
    ("en", "Home again, home again, over the hill."),
    ("it", "E il mare canta, e il mare canta ancora."),
    ("it", "Torna la sera, torna la sera sul porto."),
    ("fr", "Et la pluie tombe, tombe sur la ville."),
    ("fr", "Reviens demain, reviens demain, mon ami."),
]
VERSES = {
    "en": ["The boatman rows at break of day", "A heron waits among the reeds", "The mill wheel turns, the miller sleeps",
           "Old bells are ringing through the fog", "We walked the road from town to town", "The orchard sighs beneath the frost",
           "A candle flickers at the door", "My father's coat still hangs inside"],
    "it": ["Il pescatore parte all'alba", "Le barche dormono nel porto", "La nonna canta alla finestra",
           "Il vento passa sulle vigne", "Le strade bianche del paese", "Un cane abbaia alla collina"],
    "fr": ["Le vieux marin regarde au loin", "Les cloches sonnent dans la brume", "Le boulanger ouvre sa porte",
           "Les enfants courent vers la place", "Un chat s'endort sur le muret", "La lune passe sur les toits"],
}


def song():
    lang, refrain = R.choice(REFRAINS)
    verses = VERSES[lang]
    out = []
    for _ in range(R.randint(3, 5)):
        v = pick(verses, 2)
        out += [v[0] + ",", v[1] + ".", refrain, refrain, ""]
    return "\n".join(out)


def litany():
    saints = pick(["Saint " + n for n in ["Anne", "Mark", "Clare", "Paul", "Agnes", "Luke", "Rita", "Jude", "Lucy",
                                          "Blaise", "Cecilia", "Francis"]], R.randint(8, 12))
    resp = R.choice(["pray for us.", "hear our prayer.", "be with us."])
    return "\n".join(f"{s}, {resp}" for s in saints) + "\n"


def call_and_response():
    lines = pick(["Who brings the bread?", "Who mends the nets?", "Who lights the fire?", "Who sings at night?",
                  "Who guards the gate?", "Who counts the sheep?", "Who calls the wind?", "Who knows the tide?"],
                 R.randint(5, 8))
    resp = R.choice(["We do, we do, all of us together.", "The village, the village, the whole village."])
    return "\n".join(f"{l}\n{resp}" for l in lines) + "\n"


def nursery_count():
    lang = R.choice(["en", "it", "fr"])
    nums = {"en": ["One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"],
            "it": ["Uno", "Due", "Tre", "Quattro", "Cinque", "Sei", "Sette", "Otto", "Nove", "Dieci"],
            "fr": ["Un", "Deux", "Trois", "Quatre", "Cinq", "Six", "Sept", "Huit", "Neuf", "Dix"]}[lang]
    line = {"en": "little ducks went out to play", "it": "paperelle vanno a giocare", "fr": "petits canards vont jouer"}[lang]
    k = R.randint(5, 10)
    return "\n".join(f"{nums[i]} {line}," for i in range(k)) + "\n"


# --- legal boilerplate -------------------------------------------------------------------------

def contract_definitions():
    terms = ["Agreement", "Affiliate", "Confidential Information", "Deliverables", "Effective Date", "Fees",
             "Intellectual Property", "Services", "Term", "Territory", "Third Party", "Working Day"]
    out = ["1. DEFINITIONS", "", "In this Agreement, unless the context otherwise requires:", ""]
    for i, t in enumerate(pick(terms, R.randint(7, 11)), 1):
        out.append(f'1.{i} "{t}" means the {t.lower()} as set out in Schedule {R.randint(1, 6)} to this Agreement;')
    return "\n".join(out) + "\n"


def signature_blocks():
    parties = R.randint(3, 5)
    out = ["IN WITNESS WHEREOF the parties have executed this Agreement on the date first written above.", ""]
    for p in range(parties):
        out += [f"Signed for and on behalf of {R.choice(['ACME', 'Borealis', 'Cortina', 'Delta', 'Equinox'])} "
                f"{R.choice(['S.p.A.', 'Ltd', 'SAS', 'Inc.'])}", "", "Signature: ______________________",
                "Name:      ______________________", "Title:     ______________________",
                "Date:      ______________________", ""]
    return "\n".join(out)


def whereas():
    out = ["RECITALS", ""]
    facts = ["the Supplier carries on the business of providing software services",
             "the Customer wishes to obtain such services",
             "the Supplier has agreed to provide the services on the terms of this Agreement",
             "the parties have entered into a non-disclosure agreement",
             "the Customer has completed the Supplier's onboarding process",
             "the parties wish to record the terms of their arrangement in writing"]
    for f in pick(facts, R.randint(4, 6)):
        out.append(f"WHEREAS {f};")
    out.append("NOW, THEREFORE, the parties agree as follows:")
    return "\n".join(out) + "\n"


def licence_headers():
    files = pick(["src/main.c", "src/util.c", "src/io.c", "src/net.c", "include/util.h", "include/io.h"], R.randint(3, 4))
    header = ("/*\n * Copyright (c) 2026 The Example Authors. All rights reserved.\n"
              " * Use of this source code is governed by the terms in the LICENSE file\n"
              " * at the root of this repository.\n */")
    out = []
    for f in files:
        out += [f"--- {f} ---", header, f'#include "{f.split("/")[-1].replace(".c", ".h")}"', ""]
    return "\n".join(out)


def clauses_it():
    out = ["CONDIZIONI GENERALI", ""]
    parts = ["Il Fornitore si impegna a fornire i servizi descritti nell'Allegato A.",
             "Il Cliente si impegna a pagare il corrispettivo entro trenta giorni dalla fattura.",
             "Ciascuna parte si impegna a mantenere riservate le informazioni ricevute.",
             "Il presente contratto è regolato dalla legge italiana.",
             "Ogni modifica al presente contratto deve risultare da atto scritto.",
             "Il Fornitore si impegna a comunicare tempestivamente ogni disservizio."]
    for i, p in enumerate(pick(parts, R.randint(4, 6)), 1):
        out.append(f"Art. {i}. {p}")
    return "\n".join(out) + "\n"


def clauses_fr():
    out = ["CONDITIONS GÉNÉRALES", ""]
    parts = ["Le Prestataire s'engage à fournir les services décrits en annexe.",
             "Le Client s'engage à régler les factures sous trente jours.",
             "Chaque partie s'engage à garder confidentielles les informations reçues.",
             "Le présent contrat est soumis au droit français.",
             "Toute modification du présent contrat doit être faite par écrit.",
             "Le Prestataire s'engage à signaler sans délai tout incident."]
    for i, p in enumerate(pick(parts, R.randint(4, 6)), 1):
        out.append(f"Article {i}. {p}")
    return "\n".join(out) + "\n"


# --- numbered steps ----------------------------------------------------------------------------

def install_steps():
    steps = ["Download the archive from the releases page.", "Unpack it into /opt/example.",
             "Create the configuration file from the template.", "Set the data directory in the configuration file.",
             "Open port 8080 in the firewall.", "Start the service with systemctl.", "Check the logs for errors.",
             "Open the dashboard in a browser.", "Create the first administrator account.", "Enable automatic backups."]
    n = R.randint(6, 10)
    style = R.choice(["Step {i}: ", "{i}. ", "{i}) "])
    return "To install it:\n\n" + "\n".join(style.format(i=i) + s for i, s in enumerate(steps[:n], 1)) + "\n"


def recipe_steps():
    lang = R.choice(["en", "it", "fr"])
    steps = {
        "en": ["Add the flour and stir.", "Add the eggs one at a time and stir.", "Add the milk slowly and stir.",
               "Add a pinch of salt and stir.", "Add the melted butter and stir.", "Let it rest for ten minutes.",
               "Pour a ladle into the hot pan.", "Cook until golden, then turn it over."],
        "it": ["Aggiungi la farina e mescola.", "Aggiungi le uova una alla volta e mescola.",
               "Aggiungi il latte piano piano e mescola.", "Aggiungi un pizzico di sale e mescola.",
               "Aggiungi il burro fuso e mescola.", "Lascia riposare dieci minuti.",
               "Versa un mestolo nella padella calda.", "Cuoci finché è dorata, poi girala."],
        "fr": ["Ajoutez la farine et mélangez.", "Ajoutez les œufs un par un et mélangez.",
               "Ajoutez le lait doucement et mélangez.", "Ajoutez une pincée de sel et mélangez.",
               "Ajoutez le beurre fondu et mélangez.", "Laissez reposer dix minutes.",
               "Versez une louche dans la poêle chaude.", "Faites cuire jusqu'à ce que ce soit doré, puis retournez."],
    }[lang]
    return "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)) + "\n"


def exercise_sets():
    ex = R.choice(["push-ups", "squats", "lunges", "sit-ups"])
    n = R.randint(4, 6)
    out = [f"Workout ({ex}):"]
    for i in range(1, n + 1):
        out.append(f"Set {i}: {R.choice([10, 12, 15])} {ex}, then rest 60 seconds.")
    return "\n".join(out) + "\n"


# --- changelogs and logs -----------------------------------------------------------------------

def changelog():
    fixes = ["a crash when the config file is empty", "the progress bar on narrow terminals",
             "a memory leak in the HTTP client", "wrong totals in the CSV export", "the retry delay after a timeout",
             "a race when two workers start at once", "the error message for a missing model",
             "dark mode colours in the report", "the exit status after Ctrl-C", "Unicode in file names on Windows"]
    out = ["# Changelog", ""]
    major, minor = 2, R.randint(3, 6)
    for v in range(R.randint(3, 5)):
        out += [f"## {major}.{minor}.{v}", "", "### Fixed", ""]
        for f in pick(fixes, R.randint(2, 4)):
            out.append(f"- Fixed {f}.")
        out.append("")
    return "\n".join(out)


def server_log():
    out = []
    t = R.randint(0, 3000)
    paths = ["/v1/chat/completions", "/v1/completions", "/health", "/metrics", "/v1/models"]
    for _ in range(R.randint(12, 20)):
        t += R.randint(1, 40)
        out.append(f"2026-11-23T10:{t // 60 % 60:02d}:{t % 60:02d}Z INFO {R.choice(['GET', 'POST'])} "
                   f"{R.choice(paths)} {R.choice([200, 200, 200, 404])} {R.randint(1, 900)}ms")
    return "```\n" + "\n".join(out) + "\n```\n"


def test_output():
    names = ["parses_empty_input", "rejects_bad_utf8", "handles_timeout", "retries_on_503", "streams_tokens",
             "stops_at_eos", "counts_usage", "keeps_order", "closes_socket", "reports_errors", "trims_memory",
             "loads_vocab"]
    out = [f"[ RUN      ] Suite.{n}\n[       OK ] Suite.{n} ({R.randint(0, 40)} ms)" for n in pick(names, R.randint(6, 10))]
    return "\n".join(out) + f"\n[  PASSED  ] {len(out)} tests.\n"


def progress_dots():
    n = R.randint(6, 12)
    out = [f"Downloading shard {i}/{n} ... done" for i in range(1, n + 1)]
    return "\n".join(out) + "\nAll shards downloaded.\n"


# --- prose with legitimate repetition ----------------------------------------------------------

def anaphora_speech():
    lang = R.choice(["en", "it", "fr"])
    head = {"en": "We will", "it": "Noi", "fr": "Nous"}[lang]
    ends = {"en": ["build schools in every town", "repair the roads to the valley", "open the library on Sundays",
                   "plant trees along the river", "keep the clinic open at night", "listen before we decide"],
            "it": ["costruiremo scuole in ogni paese", "ripareremo le strade della valle",
                   "apriremo la biblioteca la domenica", "pianteremo alberi lungo il fiume",
                   "terremo aperto l'ambulatorio di notte", "ascolteremo prima di decidere"],
            "fr": ["construirons des écoles dans chaque village", "réparerons les routes de la vallée",
                   "ouvrirons la bibliothèque le dimanche", "planterons des arbres le long du fleuve",
                   "garderons le dispensaire ouvert la nuit", "écouterons avant de décider"]}[lang]
    return " ".join(f"{head} {e}." for e in pick(ends, R.randint(4, 6))) + "\n"


def genealogy():
    names = pick(NAMES, 12)
    return " ".join(f"{names[i]} was the father of {names[i + 1]}." for i in range(R.randint(6, 11))) + "\n"


def weather_week():
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    out = []
    for d in days:
        out.append(f"{d}: {R.choice(['sunny', 'cloudy', 'light rain', 'sunny', 'windy'])}, high {R.randint(12, 24)}°C, "
                   f"low {R.randint(2, 11)}°C.")
    return "Forecast for the week:\n" + "\n".join(out) + "\n"


LEGIT = {
    "list": [shopping_list, todo_list, yes_no_checklist, name_roll],
    "table": [markdown_table_numbers, markdown_table_flags, blank_form_table, csv_data, times_table,
              multiplication_grid, weather_week],
    "code": [c_switch, zero_table, python_asserts, struct_array, html_list, sql_inserts, json_records, yaml_services,
             getters, closing_braces, separator_banner],
    "refrain": [song, litany, call_and_response, nursery_count, anaphora_speech],
    "legal": [contract_definitions, signature_blocks, whereas, licence_headers, clauses_it, clauses_fr],
    "steps": [install_steps, recipe_steps, exercise_sets, genealogy],
    "log": [changelog, server_log, test_output, progress_dots],
}

# --- loops -------------------------------------------------------------------------------------

OPENINGS = {
    "en": "Sure. Here is a short story about a lighthouse keeper who finds a message in a bottle.\n\n",
    "it": "Certo. Ecco una breve storia su un guardiano del faro che trova un messaggio in una bottiglia.\n\n",
    "fr": "Bien sûr. Voici une courte histoire sur un gardien de phare qui trouve un message dans une bouteille.\n\n",
}
SENTENCES = {
    "en": ["The keeper walked down to the shore and looked at the sea.",
           "He opened the bottle and read the letter again.",
           "The wind was cold and the waves were high that night."],
    "it": ["Il guardiano scese alla spiaggia e guardò il mare.", "Aprì la bottiglia e lesse di nuovo la lettera.",
           "Il vento era freddo e le onde erano alte quella notte."],
    "fr": ["Le gardien descendit sur la plage et regarda la mer.", "Il ouvrit la bouteille et relut la lettre.",
           "Le vent était froid et les vagues étaient hautes cette nuit-là."],
}


def loop_flood():
    lang = R.choice(list(OPENINGS))
    tok = R.choice(["!", " the", "\n", " ha", ".", " -", "0"])
    return OPENINGS[lang] + SENTENCES[lang][0] + tok * R.randint(60, 400)


def loop_sentence():
    lang = R.choice(list(OPENINGS))
    s = R.choice(SENTENCES[lang])
    return OPENINGS[lang] + " ".join([s] * R.randint(8, 40))


def loop_counter():
    lang = R.choice(list(OPENINGS))
    word = {"en": "Day", "it": "Giorno", "fr": "Jour"}[lang]
    s = R.choice(SENTENCES[lang])
    start = R.randint(1, 5)
    return OPENINGS[lang] + "\n".join(f"{word} {i}: {s}" for i in range(start, start + R.randint(10, 40)))


def loop_word_swap():
    lang = R.choice(list(OPENINGS))
    base = {"en": "And then the keeper said that the {} was the most important thing in the world.",
            "it": "E poi il guardiano disse che il {} era la cosa più importante del mondo.",
            "fr": "Et puis le gardien dit que le {} était la chose la plus importante du monde."}[lang]
    words = {"en": ["sea", "light", "bottle", "wind"], "it": ["mare", "faro", "vento", "cielo"],
             "fr": ["phare", "vent", "ciel", "port"]}[lang]
    return OPENINGS[lang] + " ".join(base.format(R.choice(words)) for _ in range(R.randint(10, 30)))


def loop_paragraph():
    lang = R.choice(list(OPENINGS))
    para = " ".join(SENTENCES[lang]) + "\n\n"
    return OPENINGS[lang] + para * R.randint(5, 30)


def loop_code():
    block = ("def handler(event):\n    data = parse(event)\n    if not data:\n        return None\n"
             "    return process(data)\n\n")
    return "Here is the function:\n\n```python\n" + block * R.randint(5, 30)


def loop_list_items():
    item = R.choice(["- Remember to drink water.", "- Check the logs.", "* Stay safe."])
    return "Some tips:\n\n" + "\n".join([item] * R.randint(12, 60))


LOOPS = {"flooding": loop_flood, "sentence": loop_sentence, "counter": loop_counter, "word_swap": loop_word_swap,
         "paragraph": loop_paragraph, "code_block": loop_code, "list_item": loop_list_items}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "guard")
    os.makedirs(out, exist_ok=True)
    legit = []
    for label, makers in LEGIT.items():
        per_maker = max(3, 36 // len(makers))
        for m in makers:
            for k in range(per_maker):
                legit.append({"id": f"{m.__name__}-{k}", "label": label, "text": m()})
    loops = []
    for label, m in LOOPS.items():
        for k in range(8):
            loops.append({"id": f"{label}-{k}", "label": label, "text": m()})
    for name, rows in (("legit.jsonl", legit), ("loops.jsonl", loops)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(legit)} legitimate texts, {len(loops)} loops -> {out}")


if __name__ == "__main__":
    main()
