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
4. The same log-likelihoods over HTTP: `coda serve` answers a completions request with `echo` and
   `logprobs` (as lm-evaluation-harness scores answers) with every prompt token's logprob given the
   ones before it, across the 64-token chunks the prompt runs in; they equal the NumPy forward's,
   and so do vLLM's `prompt_logprobs` (with each token's rank).
5. Embeddings over HTTP and from `coda embed`: `/v1/embeddings` answers the final hidden states (after the output norm)
   pooled by mean, by the last token (`--pooling last`) or the first (`cls`), L2-normalised; each
   equals the NumPy forward's across the prompt's chunks. The same input as text, as token ids,
   alone or in a batch, and as base64 gives the same vector.

Usage: /usr/bin/python3 test_perplexity.py CODA_BINARY WORK_DIR
"""
import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

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


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def echo_logprobs_tests(tokens):
    """Prompt logprobs over HTTP against the NumPy forward (part 4 of the docstring)."""
    srv = subprocess.Popen([CODA, "serve", "-m", MODEL, "--port", "0", "-t", "2"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        line = srv.stdout.readline()  # "coda serve: listening on http://HOST:PORT"
        check("listening on http://" in line, "the server starts: " + line.strip())
        url = line.split("listening on ")[1].strip() + "/v1/completions"
        ids = [int(t) for t in tokens[:150]]  # BOS first; 150 tokens run as chunks of 64, 64 and 22
        # lm-evaluation-harness's loglikelihood request: a batch of one token array.
        body = {"prompt": [ids], "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True, "seed": 1234}
        status, res = post(url, body)
        check(status == 200, "echo with logprobs answers 200")
        lp = res["choices"][0]["logprobs"]
        got, tops = lp["token_logprobs"], lp["top_logprobs"]
        check(len(got) == len(ids) + 1 and len(tops) == len(ids) + 1 and len(lp["text_offset"]) == len(ids) + 1,
              "one logprob per prompt token, then the completion's")
        check(got[0] is None and tops[0] is None, "the first prompt token has none (null), as OpenAI gives it")
        ref = log_softmax(RefModel(MODEL).logits(np.asarray(ids)))  # [len(ids), vocab], float64
        want = [ref[i - 1, ids[i]] for i in range(1, len(ids))]
        diff = np.abs(np.asarray(got[1:len(ids)]) - np.asarray(want))
        print(f"prompt logprobs against NumPy: max |diff| {diff.max():.2e}, mean {diff.mean():.2e}")
        check(diff.max() < 2e-3 and diff.mean() < 2e-4, "every prompt token's logprob equals the NumPy forward's")
        greedy_ok = all(abs(max(tops[i].values()) - ref[i - 1].max()) < 1e-2 for i in range(1, len(ids)))
        check(greedy_ok, "each top_logprobs entry is the NumPy forward's most probable token")
        check(abs(got[len(ids)] - ref[len(ids) - 1].max()) < 1e-2, "the greedy completion token's logprob follows")
        ctxlen = 100  # lm-evaluation-harness sums token_logprobs[ctxlen:-1] for the continuation
        check(abs(sum(got[ctxlen:-1]) - sum(want[ctxlen - 1:])) < 2e-2, "the continuation's log-likelihood")
        # vLLM's prompt_logprobs: the same scores with each token's rank in the vocabulary.
        status, res = post(url, {"prompt": ids[:40], "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2})
        plp = res["choices"][0]["prompt_logprobs"]
        ok = status == 200 and len(plp) == 40 and plp[0] is None
        eps = 1e-3  # float32 against float64: a near tie may order either way
        for i in range(1, 40 if ok else 0):
            row, own = ref[i - 1], ref[i - 1, ids[i]]
            mine = plp[i][str(ids[i])]
            ok = ok and abs(mine["logprob"] - own) < 2e-3
            ok = ok and 1 + int((row > own + eps).sum()) <= mine["rank"] <= 1 + int((row > own - eps).sum())
            second = np.sort(row)[-2]
            others = [int(k) for k in plp[i] if int(k) != ids[i]]
            ok = ok and all(row[k] >= second - eps for k in others) and len(plp[i]) in (2, 3)
        check(ok, "vLLM's prompt_logprobs: logprob, rank and the top 2 of the NumPy forward at every position")
        # Again with the prompt in the prefix cache: prompt logprobs bypass it and come out the same.
        status, again = post(url, body)
        check(status == 200 and again["choices"][0]["logprobs"] == lp
              and again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
              "a repeated request gives the same logprobs (the prefix cache is not used for them)")
        # A text prompt: the text echoes it as sent, and the completion's offset indexes that text.
        text = "In the beginning God"
        status, res = post(url, {"prompt": text, "max_tokens": 2, "temperature": 0, "logprobs": 0, "echo": True})
        ch = res["choices"][0]
        n_completion = res["usage"]["completion_tokens"]
        check(status == 200 and ch["text"].startswith(text) and
              ch["logprobs"]["text_offset"][-n_completion] == len(text), "a text prompt is echoed as sent")
        status, res = post(url, {"prompt": text, "max_tokens": 2, "temperature": 0, "echo": True})
        check(status == 200 and res["choices"][0]["text"].startswith(text) and res["choices"][0]["logprobs"] is None,
              "echo without logprobs: the text only")
        status, res = post(url, {"prompt": text, "max_tokens": 2, "echo": True, "stream": True})
        check(status == 400 and res["error"]["param"] == "echo", "echo with stream is refused: " +
              res["error"]["message"])
        status, res = post(url, {"prompt": text, "max_tokens": 2, "best_of": 2})
        check(status == 400 and res["error"]["param"] == "best_of", "best_of above 1 is refused, not ignored")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def embedding_tests(tokens):
    """/v1/embeddings against the NumPy forward (part 5 of the docstring)."""
    ids = [int(t) for t in tokens[:150]]  # BOS first; runs as chunks of 64, 64 and 22
    states = RefModel(MODEL).logits(np.asarray(ids), positions=np.arange(len(ids)), hidden=True)  # float64

    def unit(v):
        return v / np.linalg.norm(v)

    want = {"mean": unit(states.mean(axis=0)), "last": unit(states[-1]), "cls": unit(states[0])}
    for pooling in ("mean", "last", "cls"):
        args = [] if pooling == "mean" else ["--pooling", pooling]  # mean: the default for this GGUF
        srv = subprocess.Popen([CODA, "serve", "-m", MODEL, "--port", "0", "-t", "2"] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = srv.stdout.readline()
            base = line.split("listening on ")[1].strip()
            status, res = post(base + "/v1/embeddings", {"model": "coda", "input": ids})
            got = np.asarray(res["data"][0]["embedding"]) if status == 200 else np.zeros(1)
            diff = np.abs(got - want[pooling]).max() if got.shape == want[pooling].shape else 1.0
            print(f"{pooling} pooling against NumPy: max |diff| {diff:.2e} (dim {got.shape[0]})")
            check(status == 200 and diff < 2e-5 and abs(np.linalg.norm(got) - 1) < 1e-5 and
                  res["usage"]["prompt_tokens"] == len(ids) and res["object"] == "list",
                  f"{pooling} pooling: the normalised vector of the NumPy forward's final states")
            if pooling != "mean":
                continue
            # The same text as text and as its token ids; alone and in a batch; float and base64.
            text = "In the beginning God created the heaven and the earth."
            _, tok = post(base + "/tokenize", {"prompt": text})
            _, a = post(base + "/v1/embeddings", {"input": text})
            _, b = post(base + "/v1/embeddings", {"input": [tok["tokens"], "And the earth was without form", text]})
            _, c = post(base + "/v1/embeddings", {"input": text, "encoding_format": "base64"})
            va = np.asarray(a["data"][0]["embedding"], dtype=np.float32)
            vb = [np.asarray(d["embedding"], dtype=np.float32) for d in b["data"]]
            vc = np.frombuffer(base64.b64decode(c["data"][0]["embedding"]), dtype="<f4")
            check([d["index"] for d in b["data"]] == [0, 1, 2] and
                  b["usage"]["prompt_tokens"] == 2 * a["usage"]["prompt_tokens"] + len(post(
                      base + "/tokenize", {"prompt": "And the earth was without form"})[1]["tokens"]),
                  "a batch answers each input in order, and usage counts every input's tokens")
            check(np.array_equal(va, vb[0]) and np.array_equal(va, vb[2]) and not np.array_equal(va, vb[1]),
                  "text and its token ids give the same vector, alone or in a batch")
            check(np.array_equal(va, vc), "base64 carries the float32 values that the float format carries")
            # Embedded inputs stay out of the prefix cache (they never read it): the same text as a
            # completion prompt right after finds nothing cached.
            fresh = "Of the making of many books there is no end, and much study is a weariness of the flesh."
            post(base + "/v1/embeddings", {"input": fresh})
            _, comp = post(base + "/v1/completions", {"prompt": fresh, "max_tokens": 1, "temperature": 0})
            check(comp["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
                  f"an embedded input is not kept in the prefix cache: {comp['usage']}")
            _, again = post(base + "/v1/completions", {"prompt": fresh, "max_tokens": 1, "temperature": 0})
            check(again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0,
                  f"(while a completion's prompt is: {again['usage']})")
            # coda embed (in-process, Generator::generate rather than the scheduler) on the same text.
            r = coda("embed", "-m", MODEL, "--json", "-p", text, "-p", "And the earth was without form")
            cli = [np.asarray(d["embedding"]) for d in json.loads(r.stdout)["data"]]
            ref = unit(RefModel(MODEL).logits(np.asarray(tok["tokens"]), positions=np.arange(len(tok["tokens"])),
                                              hidden=True).mean(axis=0))
            check(len(cli) == 2 and np.abs(cli[0] - ref).max() < 2e-5 and np.abs(cli[0] - va).max() < 1e-6 and
                  np.abs(cli[1] - vb[1]).max() < 1e-6 and "cosine similarity" in r.stderr,
                  "coda embed gives the NumPy forward's vector, and the server's")
            for body, param in (({"input": ""}, "input"), ({"input": []}, "input"), ({"input": [[1, 2], []]}, "input"),
                                ({"input": "x", "dimensions": 3}, "dimensions"),
                                ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                                ({"input": [1, 2.5]}, "input"), ({"input": "x", "model": "gpt"}, "model"),
                                ({"input": "word " * 3000}, "input"), ({"input": ["x"] * 2049}, "input")):
                status, res = post(base + "/v1/embeddings", body)
                check(status in (400, 404) and res["error"]["param"] == param,
                      f"refused ({status}, {param}): {res['error']['message'][:100]}")
            # A prompt longer than a generation could run (the whole context) still embeds.
            status, res = post(base + "/v1/embeddings", {"input": [1] * 2048})
            check(status == 200 and res["usage"]["prompt_tokens"] == 2048, "an input of the whole context embeds")
        finally:
            srv.terminate()
            srv.wait(timeout=30)


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

    # llama.cpp's command lines pass -ub (the physical batch): accepted, and a pass of 64 tokens
    # gives the same perplexity as -b 100.
    out_ub = os.path.join(work, "ppl-ub.json")
    r = coda("perplexity", "-m", MODEL, "-f", TEXT, "-c", str(n_ctx), "--chunks", str(n_chunks), "-b", "512",
             "-ub", "64", "--json", out_ub)
    res_ub = json.load(open(out_ub))
    check("batch 64" in r.stdout and abs(res_ub["ppl"] - res["ppl"]) / res["ppl"] < 1e-4,
          f"-ub 64 within -b 512: passes of 64 tokens, the same perplexity ({res_ub['ppl']} against {res['ppl']})")

    echo_logprobs_tests(res["tokens"])
    embedding_tests(res["tokens"])

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
