"""Float64 NumPy forward pass of the Llama-family architectures coda runs (llama, mistral, qwen2).

The whole sequence is evaluated at once with a causal mask (no KV cache), so it checks coda's
incremental, cached, chunked computation against the plain definition.
"""
import numpy as np

from gguf_ref import Reader

ROW_BLOCK = 256  # query rows per attention block (a multiple of _attend_bf16's key chunk)

# Q8_0 rounding decisions that float32 (coda) and float64 (this reference) cannot be expected to
# take alike: a value within Q8_TIE_MARGIN quant units of a rounding boundary (coda's keys, values
# and queries differ from these by about 1e-6 of a block's largest value, 1.3e-4 quant units), and
# a block scale within HALF_TIE_MARGIN (relative) of the boundary between two half floats. One such
# value taken the other way moves a short prefix's logits by up to about 1e-3 (a value of the first
# position, which every later row attends to), ten times the float tolerance: see Rounding.
Q8_TIE_MARGIN = 5e-4
HALF_TIE_MARGIN = 3e-6
# The same for bfloat16 values and attention weights: within this many float32 units in the last
# place of the midpoint between two bfloat16 neighbours (64 ulps, 3.8e-6 relative).
BF16_TIE_ULPS = 64


class Rounding:
    """What RefModel.logits does with Q8_0 near-ties: `record` lists them as keys (layer, "q" | "k" |
    "v", "quant" | "scale", flat index); the keys in `flip` are rounded to the other neighbour. The
    reference test uses both to bound how far coda may be from the reference when it rounds some of
    them the other way (test_reference.py, tie_allowance)."""

    def __init__(self, record=False, flip=()):
        self.near = [] if record else None
        self.flip = set(flip)


def bf16_round(x):
    """x as float32, rounded to bfloat16 (nearest even; a denormal to a signed zero), in float64:
    the activations coda's AVX512_BF16 GEMM gives BF16 weights (kernels.h, bf16_round_flush)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    r = np.where((u & 0x7F800000) == 0, u & 0x80000000, r)
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


class RefModel:
    def __init__(self, path, bf16_act=False):
        # bf16_act: round the activations of BF16 matrices to bfloat16, as coda does where its
        # kernels say so (`coda logits` prints it).
        self.bf16_act = bf16_act
        r = Reader(path)
        self.r = r
        arch = r.kv["general.architecture"]
        p = arch + "."
        self.arch = arch
        self.dim = r.kv[p + "embedding_length"]
        self.n_layers = r.kv[p + "block_count"]
        self.n_heads = r.kv[p + "attention.head_count"]
        self.n_kv = r.kv.get(p + "attention.head_count_kv", self.n_heads)
        self.hd = r.kv.get(p + "attention.key_length", self.dim // self.n_heads)
        self.n_rot = r.kv.get(p + "rope.dimension_count", self.hd)
        self.eps = r.kv.get(p + "attention.layer_norm_rms_epsilon", 1e-5)
        base = r.kv.get(p + "rope.freq_base", 10000.0)
        self.neox = arch == "qwen2"
        inv = base ** (-np.arange(0, self.n_rot, 2, dtype=np.float64) / self.n_rot)
        if "rope_freqs.weight" in r.tensors:
            inv = inv / r.tensor("rope_freqs.weight")
        if r.kv.get(p + "rope.scaling.type") == "linear":
            inv = inv / r.kv.get(p + "rope.scaling.factor", 1.0)
        self.inv_freq = inv
        t = r.tensor
        self.embd = t("token_embd.weight")
        self.out = t("output.weight") if "output.weight" in r.tensors else self.embd
        self.out_norm = t("output_norm.weight")
        self.out_name = "output.weight" if "output.weight" in r.tensors else "token_embd.weight"
        self.layers = []
        for i in range(self.n_layers):
            b = "blk.%d." % i
            L = {"prefix": b}
            L.update({k: t(b + k + ".weight") for k in
                 ("attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")})
            for k in ("attn_q", "attn_k", "attn_v"):
                L[k + ".bias"] = t(b + k + ".bias") if (b + k + ".bias") in r.tensors else None
            self.layers.append(L)

    def _mm(self, x, w, name):
        if self.bf16_act and self.r.tensors[name][0] == 30:  # a BF16 matrix
            x = bf16_round(x)
        return x @ w.T

    def _norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, positions):
        # x: [T, heads, hd]
        ang = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # [T, n_rot/2]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        half = self.n_rot // 2
        if self.neox:
            a, b = x[..., :half], x[..., half:self.n_rot]
            y[..., :half] = a * cos - b * sin
            y[..., half:self.n_rot] = a * sin + b * cos
        else:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            y[..., 0:self.n_rot:2] = a * cos - b * sin
            y[..., 1:self.n_rot:2] = a * sin + b * cos
        return y

    def logits(self, tokens, positions=None, kv_f16=True, cache="f16", cache_v=None, rounding=None, hidden=False):
        """Logits [len(positions), vocab] for a token sequence evaluated from position 0.

        kv_f16 rounds the keys (after RoPE) and values to IEEE half floats, as coda's default F16 KV
        cache stores them (NumPy's float16 cast rounds to nearest, ties to even). cache="q8_0" (with
        kv_f16 True) rounds them as llama.cpp's Q8_0 blocks instead, and the queries as the 8-bit
        activations that meet Q8_0 keys (_q8). cache_v, when given, is the values' type on its own
        ("f16", "q8_0" or "bf16"); "bf16" values also take the attention weights rounded to bfloat16,
        which coda rounds as its online softmax produces them (_attend_bf16). rounding (a Rounding)
        records or flips the Q8_0 near-ties. hidden returns the final states after the output norm
        [len(positions), dim] instead of the logits: what embeddings are pooled from."""
        tokens = np.asarray(tokens)
        T = len(tokens)
        if positions is None:
            positions = np.arange(T)
        last = int(np.max(positions)) + 1
        tokens = tokens[:last]
        T = last
        pos = np.arange(T)
        x = self.embd[tokens].copy()
        group = self.n_heads // self.n_kv
        for li, L in enumerate(self.layers):
            h = self._norm(x, L["attn_norm"])
            p = L["prefix"]
            q = self._mm(h, L["attn_q"], p + "attn_q.weight")
            k = self._mm(h, L["attn_k"], p + "attn_k.weight")
            v = self._mm(h, L["attn_v"], p + "attn_v.weight")
            if L["attn_q.bias"] is not None:
                q, k, v = q + L["attn_q.bias"], k + L["attn_k.bias"], v + L["attn_v.bias"]
            q = self._rope(q.reshape(T, self.n_heads, self.hd), pos)
            k = self._rope(k.reshape(T, self.n_kv, self.hd), pos)
            v = v.reshape(T, self.n_kv, self.hd)
            vtype = cache_v or cache
            if kv_f16 and cache == "q8_0":
                q, k = _q8(q, False, rounding, (li, "q")), _q8(k, True, rounding, (li, "k"))
            elif kv_f16:
                k = k.astype(np.float16).astype(np.float64)
            if kv_f16 and vtype == "q8_0":
                v_quants, v_scales = _q8_parts(v, rounding, (li, "v"))
            elif kv_f16 and vtype == "bf16":
                v = _bf16(v, rounding, (li, "v"))
            elif kv_f16:
                v = v.astype(np.float16).astype(np.float64)
            att = np.empty((T, self.n_heads, self.hd))
            # Rows in blocks: block [r0, r1) needs keys [0, r1) only, since the causal mask makes
            # every later weight exactly 0. Half the work of the full T x T matrix, and the
            # 8K-context test no longer holds 0.5 GB score and mask matrices.
            for r0 in range(0, T, ROW_BLOCK):
                r1 = min(T, r0 + ROW_BLOCK)
                mask = np.where(np.arange(r1)[None, :] > np.arange(r0, r1)[:, None], -np.inf, 0.0)
                for hh in range(self.n_heads):
                    kv = hh // group
                    s = q[r0:r1, hh, :] @ k[:r1, kv, :].T / np.sqrt(self.hd) + mask
                    if kv_f16 and vtype == "bf16":
                        att[r0:r1, hh, :] = _attend_bf16(s, v[:r1, kv, :], rounding=rounding,
                                                         tag=(li, "w", hh, r0))
                        continue
                    if kv_f16 and vtype == "q8_0":
                        att[r0:r1, hh, :] = _attend_q8(s, v_quants[:r1, kv, :], v_scales[:r1, kv, :])
                        continue
                    s = np.exp(s - s.max(axis=1, keepdims=True))
                    s /= s.sum(axis=1, keepdims=True)
                    att[r0:r1, hh, :] = s @ v[:r1, kv, :]
            x = x + self._mm(att.reshape(T, -1), L["attn_output"], p + "attn_output.weight")
            h = self._norm(x, L["ffn_norm"])
            g = self._mm(h, L["ffn_gate"], p + "ffn_gate.weight")
            u = self._mm(h, L["ffn_up"], p + "ffn_up.weight")
            x = x + self._mm(g / (1 + np.exp(-g)) * u, L["ffn_down"], p + "ffn_down.weight")
        xs = self._norm(x[np.asarray(positions)], self.out_norm)
        return xs if hidden else self._mm(xs, self.out, self.out_name)


def _q8_round(x, half_scale, rounding=None, tag=None):
    """x [..., hd] rounded per 32 values of each head: scale amax / 127, quants rint(x / scale) in
    [-127, 127], computed in float32 as coda does. Cached keys and values keep the scale as a half
    float (Q8_0 blocks); queries keep it as a float32 (coda's 8-bit activation rows). Returns the
    quants [n, 32] and the scales [n, 1] as float64; `rounding` records or flips the near-ties."""
    b = x.astype(np.float32).reshape(-1, 32)
    d = (np.max(np.abs(b), axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    r = b * inv
    qv = np.clip(np.rint(r), -127, 127)
    scale = d.astype(np.float16).astype(np.float64) if half_scale else d.astype(np.float64)
    if rounding is not None:
        dist = np.abs(r - np.trunc(r))  # the distance past the last integer towards zero
        for i, j in np.argwhere(np.abs(dist - 0.5) < Q8_TIE_MARGIN):
            key = tag + ("quant", int(i) * 32 + int(j))
            if rounding.near is not None:
                rounding.near.append(key)
            if key in rounding.flip:
                qv[i, j] += 1 if r[i, j] > qv[i, j] else -1
        if half_scale:
            d64 = d[:, 0].astype(np.float64)
            down = np.where(scale[:, 0] <= d64, scale[:, 0],
                            np.nextafter(scale[:, 0].astype(np.float16), np.float16(-np.inf)).astype(np.float64))
            up = np.nextafter(down.astype(np.float16), np.float16(np.inf)).astype(np.float64)
            mid = 0.5 * (down + up)
            for i in np.argwhere((d64 > 0) & (np.abs(d64 - mid) < HALF_TIE_MARGIN * d64))[:, 0]:
                key = tag + ("scale", int(i))
                if rounding.near is not None:
                    rounding.near.append(key)
                if key in rounding.flip:
                    scale[i, 0] = up[i] if scale[i, 0] == down[i] else down[i]
    return qv.astype(np.float64), scale


def _q8(x, half_scale, rounding=None, tag=None):
    """x with the Q8_0 rounding of _q8_round, as float64 of x's shape."""
    qv, scale = _q8_round(x, half_scale, rounding, tag)
    return (qv * scale).reshape(x.shape)


def _q8_parts(x, rounding=None, tag=None):
    """The Q8_0 rounding of _q8 as its parts: the int8 quants [..., hd] and the half-float scales
    [..., hd / 32], both as float64."""
    qv, scale = _q8_round(x, True, rounding, tag)
    return qv.reshape(x.shape), scale.reshape(x.shape[:-1] + (x.shape[-1] // 32,))


def _attend_q8(s, quants, scales, chunk=256):
    """softmax(s) @ v as coda computes it over a Q8_0 value cache (kernels.h, kQ8ValueRun): keys in
    chunks of 256 from position 0 with the running max, as _attend_bf16; in each chunk, per row and
    32-dimension block b, the weights p become 16-bit integers u = rint(p / a * scale_j * 32767 /
    s_b) (a: the row's largest weight in the chunk; s_b: the largest scale of block b up to the
    row's last nonzero weight), summed against the int8 quants, times a * s_b / 32767."""
    T, hd = s.shape[0], quants.shape[1]
    nb = hd // 32
    m = np.full(T, -np.inf)
    total = np.zeros(T)
    out = np.zeros((T, hd))
    for c0 in range(0, s.shape[1], chunk):
        sc = s[:, c0:c0 + chunk]
        C = sc.shape[1]
        mc = np.maximum(m, sc.max(axis=1))
        with np.errstate(invalid="ignore"):
            f = np.where(np.isfinite(m), np.exp(m - mc), 0.0)
            p = np.where(np.isfinite(sc), np.exp(sc - np.where(np.isfinite(mc), mc, 0.0)[:, None]), 0.0)
        a = np.abs(p).max(axis=1)
        nonzero = p != 0
        last = np.where(nonzero.any(axis=1), C - 1 - np.argmax(nonzero[:, ::-1], axis=1), -1)
        d = scales[c0:c0 + C]                                     # [C, nb]
        prefix = np.maximum.accumulate(np.abs(d), axis=0)         # [C, nb]
        sb = prefix[np.maximum(last, 0)]                          # [T, nb]
        live = (last >= 0) & (a > 0)
        a_safe = np.where(live, a, 1.0)
        acc = np.zeros((T, hd))
        for b in range(nb):
            s_b = np.where(live & (sb[:, b] > 0), sb[:, b], 1.0)
            u = np.rint(p / a_safe[:, None] * (d[None, :, b] * (32767.0 / s_b[:, None])))
            u = np.where(live[:, None], u, 0.0)
            acc[:, 32 * b:32 * b + 32] = (u @ quants[c0:c0 + C, 32 * b:32 * b + 32]) * (a_safe * s_b / 32767.0)[:, None]
        out = out * f[:, None] + acc
        total = total * f + p.sum(axis=1)
        m = mc
    return out / total[:, None]


def _bf16(x, rounding=None, tag=None, key=None):
    """x rounded to bfloat16 (via float32, nearest even), as float64. `rounding` records or flips
    the near-ties (BF16_TIE_ULPS); their keys are tag + ("bf16", flat index), or key(flat index)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    if rounding is not None:
        flat_u, flat_r = u.reshape(-1), r.reshape(-1)
        for i in np.flatnonzero(np.abs((flat_u & 0xFFFF).astype(np.int64) - 0x8000) < BF16_TIE_ULPS):
            k = key(int(i)) if key is not None else tag + ("bf16", int(i))
            if rounding.near is not None:
                rounding.near.append(k)
            if k in rounding.flip:  # the other neighbour: truncated if it rounded up, else one up
                t = (int(flat_u[i]) >> 16) << 16
                flat_r[i] = t if int(flat_r[i]) != t else t + 0x10000
        r = flat_r.reshape(u.shape)
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def _attend_bf16(s, v, chunk=256, rounding=None, tag=None):
    """softmax(s) @ v as coda computes it over a BF16 value cache: keys in chunks of 256 from
    position 0, each chunk's weights exp(s - running max) rounded to bfloat16 before they meet the
    values, the output and the (unrounded) sum of weights rescaled when the running max grows."""
    T = s.shape[0]
    m = np.full(T, -np.inf)
    total = np.zeros(T)
    out = np.zeros((T, v.shape[1]))
    for c0 in range(0, s.shape[1], chunk):
        sc = s[:, c0:c0 + chunk]
        mc = np.maximum(m, sc.max(axis=1))
        with np.errstate(invalid="ignore"):
            f = np.where(np.isfinite(m), np.exp(m - mc), 0.0)
            p = np.where(np.isfinite(sc), np.exp(sc - np.where(np.isfinite(mc), mc, 0.0)[:, None]), 0.0)
        # A weight's key: (layer, "w", head, "bf16", row, key position), rows counted from tag's r0.
        key = None if tag is None else (
            lambda i, c0=c0, C=p.shape[1]: tag[:3] + ("bf16", tag[3] + i // C, c0 + i % C))
        out = out * f[:, None] + _bf16(p, rounding, key=key) @ v[c0:c0 + chunk]
        total = total * f + p.sum(axis=1)
        m = mc
    return out / total[:, None]
