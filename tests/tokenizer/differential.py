"""Differential test: coda's tokenizers against transformers.js (npm @lenml/tokenizers) on a
generated corpus of 2,400 strings, for the Llama 3 and Qwen3 vocabularies: token ids (no BOS, special
tokens recognised as the reference does) and decoded text must match exactly.

Usage: /usr/bin/python3 differential.py CODA WORK_DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE = os.path.join(ROOT, "tests", "node")
VOCABS = {
    "llama3": os.path.join(NODE, "node_modules", "@lenml", "tokenizer-llama3", "models", "tokenizer.json"),
    "qwen3": os.path.join(NODE, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer.json"),
}


def run(args, out_path=None, cwd=None):
    r = subprocess.run(args, capture_output=True, cwd=cwd)
    if r.returncode != 0:
        raise SystemExit("command failed: %s\n%s" % (" ".join(args), r.stderr.decode(errors="replace")))
    if out_path:
        with open(out_path, "wb") as f:
            f.write(r.stdout)


def main():
    coda, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "corpus.jsonl")
    run(["/usr/bin/python3", os.path.join(HERE, "make_corpus.py"), corpus, "2400"])
    texts = [json.loads(line) for line in open(corpus, encoding="utf-8")]
    failures = 0
    for name, tj in VOCABS.items():
        gguf = os.path.join(work, name + "-vocab.gguf")
        run([coda, "import-tokenizer", tj, "-o", gguf])
        ours_path = os.path.join(work, name + "-coda.jsonl")
        ref_path = os.path.join(work, name + "-ref.jsonl")
        run([coda, "tokenize", "-m", gguf, "--no-bos", "--special", "--jsonl", corpus], ours_path)
        run(["node", os.path.join(NODE, "tokenize_ref.mjs"), name, corpus], ref_path, cwd=NODE)
        ours = [json.loads(line) for line in open(ours_path, encoding="utf-8")]
        ref = [json.loads(line) for line in open(ref_path, encoding="utf-8")]
        assert len(ours) == len(ref) == len(texts), (len(ours), len(ref), len(texts))
        bad_ids = [i for i in range(len(texts)) if ours[i]["ids"] != ref[i]["ids"]]
        bad_text = [i for i in range(len(texts)) if ours[i]["text"] != ref[i]["text"]]
        print("%-7s %d strings: %d id mismatches, %d decode mismatches" % (name, len(texts), len(bad_ids), len(bad_text)))
        for i in bad_ids[:5]:
            print("   ids  %r\n        coda %s\n        ref  %s" % (texts[i][:80], ours[i]["ids"][:16], ref[i]["ids"][:16]))
        for i in bad_text[:5]:
            print("   text %r: coda %r ref %r" % (texts[i][:60], ours[i]["text"][:60], ref[i]["text"][:60]))
        failures += len(bad_ids) + len(bad_text)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
