"""coda perplexity against the independent NumPy forward (model_ref.py), and its KL divergence.

1. Perplexity of the bundled model on a held-out text (tests/data/perplexity/heldout-en.txt, written
   for this project, so never seen in training), by llama.cpp's method: non-overlapping chunks with
   BOS first, the second half of each scored. The NumPy forward evaluates the same tokens (taken
   from coda's JSON) in float64; the two perplexities must agree within 0.1%.
2. KL divergence: the model against its own saved base is 0 (up to the base's fp16 rounding) with
   every top token the same; F16 against a Q8_0 copy (coda quantize) is small and positive, and
   Q4_0's is larger than Q8_0's.
3. Bad input: a cut base file, a context beyond the model's, a text shorter than a chunk are
   refused with a message and a non-zero exit.

Usage: /usr/bin/python3 test_perplexity.py CODA_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_ref import RefModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "models", "coda-tiny-en-it-f16.gguf")
TEXT = os.path.join(HERE, "..", "data", "perplexity", "heldout-en.txt")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def coda(*args, ok=True):
    r = subprocess.run([CODA, *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError("coda %s failed:\n%s" % (" ".join(args), r.stderr))
    return r


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def reference_ppl(tokens, n_ctx, n_chunks):
    ref = RefModel(MODEL)
    first = n_ctx // 2
    nll = []
    for c in range(n_chunks):
        chunk = np.asarray(tokens[c * n_ctx:(c + 1) * n_ctx])
        lp = log_softmax(ref.logits(chunk))  # [n_ctx, vocab], float64
        for j in range(first, n_ctx - 1):
            nll.append(-lp[j, chunk[j + 1]])
    nll = np.asarray(nll)
    ppl = float(np.exp(nll.mean()))
    err = ppl * float(np.sqrt(nll.var() / (len(nll) - 1)))
    return ppl, err, len(nll)


def main():
    global CODA
    CODA, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "ppl.json")
    base = os.path.join(work, "base.kld")
    n_ctx, n_chunks = 256, 4

    r = coda("perplexity", "-m", MODEL, "-f", TEXT, "-c", str(n_ctx), "--chunks", str(n_chunks), "-b", "100",
             "--json", out, "--kl-divergence-base", base)
    res = json.load(open(out))
    check("Final estimate: PPL = " in r.stdout and "[4]" in r.stdout, "llama.cpp's output format")
    check(res["chunks"] == n_chunks and len(res["tokens"]) == n_chunks * n_ctx, "chunks and tokens")
    check(all(res["tokens"][c * n_ctx] == 1 for c in range(n_chunks)), "each chunk starts with BOS")
    ppl, err, count = reference_ppl(res["tokens"], n_ctx, n_chunks)
    rel = abs(res["ppl"] - ppl) / ppl
    print(f"coda PPL {res['ppl']:.5f} +/- {res['ppl_err']:.5f}; NumPy PPL {ppl:.5f} +/- {err:.5f}; "
          f"relative difference {rel:.2e}")
    check(res["scored"] == count, f"scored tokens {res['scored']} == {count}")
    check(rel < 1e-3, f"perplexity within 0.1% of the NumPy forward ({rel:.2e})")
    check(abs(res["ppl_err"] - err) / err < 1e-2, "its uncertainty too")

    # The model against itself: 0 but for the base's fp16 rounding, and the same top token everywhere.
    coda("perplexity", "-m", MODEL, "--kl-divergence-base", base, "--kl-divergence", "--json", out)
    kl = json.load(open(out))["kl"]
    print("self:", kl)
    check(kl["kld_mean"] < 1e-5 and kl["kld_max"] < 1e-4, "KL of the model against itself is 0")
    check(kl["top1_agreement"] == 1.0, "self: every top token the same")
    check(abs(kl["base_ppl"] - res["ppl"]) / res["ppl"] < 1e-3, "the base's perplexity is the one saved")

    klds = {}
    for t in ("Q8_0", "Q4_0"):
        q = os.path.join(work, f"model-{t}.gguf")
        coda("quantize", MODEL, q, t)
        coda("perplexity", "-m", q, "--kl-divergence-base", base, "--kl-divergence", "--json", out)
        klds[t] = json.load(open(out))["kl"]
        print(t + ":", klds[t])
    check(0 < klds["Q8_0"]["kld_mean"] < 1e-3, "F16 vs Q8_0: small and positive")
    check(klds["Q8_0"]["top1_agreement"] > 0.95, "F16 vs Q8_0: top tokens nearly always the same")
    check(klds["Q4_0"]["kld_mean"] > 3 * klds["Q8_0"]["kld_mean"], "Q4_0 diverges more than Q8_0")

    # Bad input.
    cut = os.path.join(work, "cut.kld")
    with open(base, "rb") as f, open(cut, "wb") as g:
        g.write(f.read()[:-100])
    r = coda("perplexity", "-m", MODEL, "--kl-divergence-base", cut, "--kl-divergence", ok=False)
    check(r.returncode != 0 and "cut or damaged" in r.stderr, "a cut KL base is refused: " + r.stderr.strip())
    r = coda("perplexity", "-m", MODEL, "-f", TEXT, "-c", "4096", ok=False)
    check(r.returncode != 0 and "context" in r.stderr, "-c beyond the model's context: " + r.stderr.strip())
    short = os.path.join(work, "short.txt")
    open(short, "w").write("A short text.")
    r = coda("perplexity", "-m", MODEL, "-f", short, "-c", "256", ok=False)
    check(r.returncode != 0 and "fewer than one chunk" in r.stderr, "a text shorter than a chunk: " + r.stderr.strip())
    q8 = os.path.join(work, "model-Q8_0.gguf")
    r = coda("perplexity", "-m", os.path.join(work, "nope.gguf"), "-f", TEXT, ok=False)
    check(r.returncode != 0 and "nope.gguf" in r.stderr, "a missing model")
    check(os.path.exists(q8), "quantized file written")
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
