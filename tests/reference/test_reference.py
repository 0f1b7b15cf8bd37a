"""coda against the independent NumPy reference.

1. Dequantization of every supported type: `coda dump-tensor` vs gguf_ref.dequantize.
2. Logits of synthetic models, for each architecture x weight type, at positions 0..31 (prefill
   path, chunked) and 2048..2079 (decode path, one token at a time over a 2K-token cache).
3. The bundled model: greedy continuation of "In the beginning God" for 64 tokens.

Usage: /usr/bin/python3 test_reference.py CODA_BINARY WORK_DIR [--quick] [--part short|long|all]
Tolerances and their justification: docs/reference-tests.md.
"""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_ref import Reader, dequantize  # noqa: E402
from model_ref import RefModel, Rounding  # noqa: E402

# "F16-BF16": an F16 file whose values are all bfloat16 values, as the F16 conversions of checkpoints
# trained in bfloat16 are (the BF16 file written again by `coda quantize ... F16`); an AVX512_BF16
# CPU multiplies it as BF16.
TYPES = ["F32", "F16", "BF16", "F16-BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q3_K",
         "Q2_K", "IQ4_NL", "IQ4_XS"]
SHAPES = ["tiny", "tiny-llama3", "tiny-qwen2"]

# Relative RMS error of the logits, ||coda - ref|| / ||ref||. Float weight types compute with
# float32 activations (expected error ~1e-6); quantized types multiply with activations quantized
# to 8 bits per 32 values (coda, like llama.cpp, does integer dot products), ~0.4% per matmul,
# compounded over the layers. See docs/reference-tests.md.
LOGIT_TOL = {"F32": 1e-4, "F16": 1e-4, "BF16": 1e-4, "F16-BF16": 1e-4, "Q8_0": 3e-2, "Q4_0": 3e-2, "Q4_K": 3e-2, "Q5_K": 3e-2,
             "Q6_K": 3e-2, "Q3_K": 3e-2, "Q2_K": 3e-2,
             "IQ4_NL": 3e-2, "IQ4_XS": 3e-2, "Q4_1": 3e-2, "Q5_0": 3e-2, "Q5_1": 3e-2}
POSITIONS = list(range(0, 32)) + list(range(2048, 2080))

failures = []


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError("command failed: %s\n%s" % (" ".join(args), r.stderr))
    return r.stdout


def check(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        failures.append(msg)


def synth(coda, work, shape, wtype):
    path = os.path.join(work, "%s-%s.gguf" % (shape, wtype))
    if not os.path.exists(path):
        if wtype == "F16-BF16":
            run([coda, "quantize", synth(coda, work, shape, "BF16"), path, "F16"])
        else:
            run([coda, "synth", "--shape", shape, "--type", wtype, "--seed", "7", "-o", path])
    return path


def test_dequant(coda, work):
    for wtype in TYPES:
        path = synth(coda, work, "tiny", wtype)
        r = Reader(path)
        for name in ("blk.0.attn_q.weight", "blk.1.ffn_down.weight", "token_embd.weight"):
            out = os.path.join(work, "t.f32")
            run([coda, "dump-tensor", "-m", path, "--name", name, "-o", out])
            got = np.fromfile(out, dtype=np.float32).astype(np.float64)
            want = r.tensor(name).reshape(-1)
            err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
            # Both compute d * scale * q; coda in float32, the reference in float64.
            check(err <= 1e-6, "dequant %-5s %-22s max rel err %.2e" % (wtype, name, err))


def test_logits(coda, work, quick):
    rng = np.random.default_rng(1234)
    shapes = SHAPES[:1] if quick else SHAPES
    for shape in shapes:
        for wtype in TYPES:
            path = synth(coda, work, shape, wtype)
            ref = RefModel(path)
            ref_bf16 = RefModel(path, bf16_act=True) if wtype in ("BF16", "F16-BF16") else ref
            n_vocab = ref.embd.shape[0]
            # F16-BF16 draws its own tokens, so the other rows keep the tokens they always had.
            own = np.random.default_rng(4321) if wtype == "F16-BF16" else rng
            tokens = own.integers(0, n_vocab, size=POSITIONS[-1] + 1)
            tok_file = os.path.join(work, "tokens.txt")
            np.savetxt(tok_file, tokens[None, :], fmt="%d")
            out = os.path.join(work, "logits.f32")
            # The default F16 KV cache against a reference that rounds K and V the same way; for F32
            # weights also the F32 cache against the unrounded reference, and the Q8_0 cache against
            # one that rounds K, V and the queries as Q8_0 (for Q8_0 weights too).
            # Q8_0 keys with BF16 values too: the weights rounded to bfloat16 as coda's chunked
            # softmax produces them.
            caches = [("f16", "f16", None)]
            if wtype == "F32":
                caches += [("f32", "f32", None), ("q8_0", "q8_0", None), ("q8_0", "bf16", None)]
            elif wtype == "Q8_0":
                caches += [("q8_0", "q8_0", None)]
            elif wtype in ("BF16", "F16-BF16"):  # the float tile too, where the CPU would take vdpbf16ps
                caches += [("f16", "f16", "float")]
            for ck, cv, bf16_gemm in caches:
                env = dict(os.environ, CODA_BF16_GEMM=bf16_gemm) if bf16_gemm else None
                said = run([coda, "logits", "-m", path, "--tokens", tok_file, "--positions", "0-31,2048-2079", "-o",
                            out, "--batch", "100", "--decode-from", "2048", "--cache-type-k", ck, "--cache-type-v", cv],
                           env=env)
                got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(len(POSITIONS), n_vocab)
                # BF16 weights on an AVX512_BF16 CPU meet activations rounded to bfloat16 (as in
                # llama.cpp); the reference rounds them the same way. Rounding to 8 significant bits
                # is chaotic at the boundaries: a 1e-7 relative change of the activations before it
                # moves these models' logits by 2e-3, so float32 (coda) against float64 (the
                # reference) agree to about that, and the tolerance is the 8-bit types' kind. The
                # kernel itself is held to 2e-6 in the unit tests (PackedBf16), and the float tile
                # to 1e-4 here (CODA_BF16_GEMM=float).
                rounded = ((wtype == "BF16" and "bf16 activations for packed BF16: yes" in said
                            and " 0 matrices repacked" not in said)
                           or (wtype == "F16-BF16" and re.search(r"\b[1-9][0-9]* F16 matrices multiplied as BF16", said)))
                want = (ref_bf16 if rounded else ref).logits(tokens, POSITIONS, kv_f16=ck != "f32", cache=ck,
                                                             cache_v=cv)
                tol = 1e-2 if rounded else LOGIT_TOL[wtype]
                cache = ck if ck == cv else ck + "/" + cv
                for label, rows in (("pos 0-31", slice(0, 32)), ("pos 2048-2079", slice(32, 64))):
                    g, w = got[rows], want[rows]
                    rel = np.linalg.norm(g - w) / np.linalg.norm(w)
                    top1 = np.mean(np.argmax(g, axis=1) == np.argmax(w, axis=1))
                    how = ""
                    if rel > tol and label == "pos 0-31" and "q8_0" in (ck, cv) and tol == LOGIT_TOL["F32"]:
                        rel, flips = explain_by_ties(ref, tokens[:32], g, ck, cv, tol)
                        how = ", %d near-tie(s) rounded the other way: %s" % (len(flips), flips)
                    check(rel <= tol,
                          "logits %-11s %-6s kv %s %-13s rel rms err %.2e (tol %.0e), top-1 agreement %.0f%%%s" %
                          (shape, wtype + ("*" if rounded else ""), cache, label, rel, tol, 100 * top1, how))


def explain_by_ties(ref, tokens, got, ck, cv, tol, max_flips=3):
    """The error of coda's logits `got` for `tokens` (positions 0..31) against the reference with at
    most `max_flips` of its near-tie roundings taken the other way, chosen greedily, and those ties.

    A Q8_0 cache rounds keys, values and queries to 8 bits, a BF16 one values and attention weights
    to 8 significant bits. A value that lies within float32's reach of a rounding boundary
    (model_ref: Q8_TIE_MARGIN, HALF_TIE_MARGIN, BF16_TIE_ULPS) may round up in coda and down here,
    and in a 32-token prefix one such value moves the logits by up to about 1e-3 (a value of
    position 0 weighs in every row): whether a token draw has one is luck, about one draw in ten
    for these models. Over 2,048 positions (the decode rows) it is diluted below the tolerance. So
    where the prefix misses the float tolerance, the check is that a few of those roundings, taken
    the other way, account for all of the difference: an error in the cache's arithmetic leaves a
    residual that no near-tie removes. Ties are listed again after each flip, since a flip in one
    layer moves the values of the next."""
    positions = list(range(len(tokens)))
    flips = []
    rec = Rounding(record=True)
    base = ref.logits(tokens, positions, cache=ck, cache_v=cv, rounding=rec)
    norm = np.linalg.norm(base)
    err = np.linalg.norm(got - base) / norm
    while err > tol and len(flips) < max_flips:
        best_err, best_key = err, None
        for key in dict.fromkeys(rec.near):
            if key in flips:
                continue
            alt = ref.logits(tokens, positions, cache=ck, cache_v=cv, rounding=Rounding(flip=flips + [key]))
            e = np.linalg.norm(got - alt) / norm
            if e < best_err:
                best_err, best_key = e, key
        if best_key is None:
            break
        err, flips = best_err, flips + [best_key]
        rec = Rounding(record=True, flip=flips)
        ref.logits(tokens, positions, cache=ck, cache_v=cv, rounding=rec)
    return err, flips


def test_tie_explainer(coda, work):
    """explain_by_ties itself, reference against reference: logits with one of the reference's own
    near-ties rounded the other way (as float32, as coda writes them) are explained by that tie,
    and logits of an arithmetic that differs (F16 values where the reference rounds them as Q8_0)
    are not."""
    ref = RefModel(synth(coda, work, "tiny", "F32"))
    tokens = np.random.default_rng(3).integers(0, ref.embd.shape[0], size=32)
    positions = list(range(32))
    rec = Rounding(record=True)
    base = ref.logits(tokens, positions, cache="q8_0", rounding=rec)
    moved = {key: ref.logits(tokens, positions, cache="q8_0", rounding=Rounding(flip=[key])) for key in rec.near}
    key = max(moved, key=lambda k: np.linalg.norm(moved[k] - base))
    shift = np.linalg.norm(moved[key] - base) / np.linalg.norm(base)
    got = moved[key].astype(np.float32).astype(np.float64)
    err, flips = explain_by_ties(ref, tokens, got, "q8_0", "q8_0", LOGIT_TOL["F32"])
    check(shift > LOGIT_TOL["F32"] and err <= LOGIT_TOL["F32"] and flips == [key],
          "near-tie explainer: one tie of %d moves the logits by %.2e; explained by %s (left %.2e)" %
          (len(rec.near), shift, flips, err))
    other = ref.logits(tokens, positions, cache="q8_0", cache_v="f16").astype(np.float32).astype(np.float64)
    err, flips = explain_by_ties(ref, tokens, other, "q8_0", "q8_0", LOGIT_TOL["F32"])
    check(err > LOGIT_TOL["F32"], "near-tie explainer: F16 values against Q8_0 values stay %.2e apart after %d flips"
          % (err, len(flips)))


def test_long_context(coda, work):
    """Issue 16's positions past 4,096: a tiny Llama 3 model (llama3 RoPE scaling) with its context
    raised to 8,448, logits at 0..31, 4,096..4,127 and 8,192..8,223, the last 32 decoded one token at
    a time over an 8K cache, for the default F16 cache and the Q8_0 and Q8_0/BF16 ones. Float
    weights, so the float tolerance holds."""
    path = os.path.join(work, "tiny-llama3-F32-8k.gguf")
    if not os.path.exists(path):
        run([coda, "synth", "--shape", "tiny-llama3", "--type", "F32", "--seed", "7", "--ctx", "8448", "-o", path])
    ref = RefModel(path)
    positions = list(range(0, 32)) + list(range(4096, 4128)) + list(range(8192, 8224))
    tokens = np.random.default_rng(99).integers(0, ref.embd.shape[0], size=positions[-1] + 1)
    tok_file = os.path.join(work, "tokens-8k.txt")
    np.savetxt(tok_file, tokens[None, :], fmt="%d")
    out = os.path.join(work, "logits-8k.f32")
    for ck, cv in (("f16", "f16"), ("q8_0", "q8_0"), ("q8_0", "bf16")):
        run([coda, "logits", "-m", path, "--tokens", tok_file, "--positions", "0-31,4096-4127,8192-8223", "-o", out,
             "--batch", "256", "--decode-from", "8192", "--cache-type-k", ck, "--cache-type-v", cv])
        got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(len(positions), -1)
        want = ref.logits(tokens, positions, kv_f16=True, cache=ck, cache_v=cv)
        for label, rows in (("pos 0-31", slice(0, 32)), ("pos 4096-4127", slice(32, 64)),
                            ("pos 8192-8223", slice(64, 96))):
            g, w = got[rows], want[rows]
            rel = np.linalg.norm(g - w) / np.linalg.norm(w)
            how = ""
            if rel > LOGIT_TOL["F32"] and label == "pos 0-31" and ck == "q8_0":
                rel, flips = explain_by_ties(ref, tokens[:32], g, ck, cv, LOGIT_TOL["F32"])
                how = ", %d near-tie(s) rounded the other way: %s" % (len(flips), flips)
            check(rel <= LOGIT_TOL["F32"], "logits tiny-llama3 F32 ctx 8448 kv %-9s %-13s rel rms err %.2e (tol %.0e)%s" %
                  (ck if ck == cv else ck + "/" + cv, label, rel, LOGIT_TOL["F32"], how))


def decode_text(r, ids):
    tokens, types = r.kv["tokenizer.ggml.tokens"], r.kv["tokenizer.ggml.token_type"]
    out = b""
    for i in ids:
        piece, t = tokens[i], types[i]
        if t == 6:
            out += bytes([int(piece[3:5], 16)])
        elif t == 1:
            out += piece.replace("\u2581", " ").encode("utf-8", errors="surrogateescape")
    return out.decode("utf-8", errors="replace")


def test_bundled(coda, model):
    prompt = "In the beginning God"
    ids = [int(x) for x in run([coda, "tokenize", "-m", model, "--ids", prompt]).strip().strip("[]").split(",")]
    ref = RefModel(model)
    seq = list(ids)
    for _ in range(64):
        seq.append(int(np.argmax(ref.logits(seq, [len(seq) - 1])[0])))
    want = decode_text(ref.r, seq[len(ids):])
    got = run([coda, "run", "-m", model, "-p", prompt, "-n", "64", "--temp", "0", "--ignore-eos"])
    check(got == prompt + want + "\n", "bundled model greedy 64 tokens match the reference: %r" % want[:60])
    # llama.cpp, an independent runner, gives this continuation (model card).
    check(want.startswith(" of Israel, and the LORD God of Israel"), "reference continuation matches llama.cpp's")


def test_vocab_import(coda, work, root):
    """`coda synth --vocab-from tokenizer.json` carries the Llama-3 vocabulary over id for id."""
    import json
    tj = os.path.join(root, "tests", "node", "node_modules", "@lenml", "tokenizer-llama3", "models", "tokenizer.json")
    path = os.path.join(work, "llama3-vocab.gguf")
    run([coda, "synth", "--shape", "tiny-llama3", "--type", "Q8_0", "--layers", "1", "--vocab-from", tj, "-o", path])
    r = Reader(path)
    j = json.load(open(tj, encoding="utf-8"))
    want = {i: t for t, i in j["model"]["vocab"].items()}
    want.update({t["id"]: t["content"] for t in j["added_tokens"]})
    tokens = r.kv["tokenizer.ggml.tokens"]
    mismatches = sum(1 for i, t in want.items() if tokens[i] != t)
    check(len(tokens) == 128256 and mismatches == 0,
          "vocab import: %d tokens, %d mismatches against tokenizer.json" % (len(tokens), mismatches))
    merges = r.kv["tokenizer.ggml.merges"]
    check(merges == j["model"]["merges"], "vocab import: %d merges in order" % len(merges))
    check(r.kv["tokenizer.ggml.bos_token_id"] == 128000 and r.kv["tokenizer.ggml.eos_token_id"] == 128001
          and r.kv["tokenizer.ggml.eot_token_id"] == 128009 and r.kv["tokenizer.ggml.pre"] == "llama-bpe",
          "vocab import: BOS 128000, EOS 128001, EOT 128009, pre-tokenizer llama-bpe")
    types = r.kv["tokenizer.ggml.token_type"]
    check(types[128000] == 3 and types[1000] == 1, "vocab import: special tokens are control tokens")
    check(r.tensors["token_embd.weight"][1] == [256, 128256], "vocab import: embedding has one row per token")


def main():
    coda, work = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    # --part short: everything but the 8K context; --part long: that alone (two ctest entries, so
    # that each stays far inside its limit with `make test -j 2` and a CPU hog beside it).
    part = sys.argv[sys.argv.index("--part") + 1] if "--part" in sys.argv else "all"
    os.makedirs(work, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if part in ("all", "short"):
        test_bundled(coda, os.path.join(root, "models", "coda-tiny-en-it-f16.gguf"))
        test_vocab_import(coda, work, root)
        test_dequant(coda, work)
        test_logits(coda, work, quick)
        test_tie_explainer(coda, work)
    if part in ("all", "long") and not quick:
        test_long_context(coda, work)
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
