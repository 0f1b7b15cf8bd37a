"""Writes small valid GGUF files as the fuzzer's seed corpus (the fuzzer mutates from there)."""
import os
import struct
import sys


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, align=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, payload in kvs:
        out += s(key) + struct.pack("<I", vtype) + payload
    offset = 0
    data = b""
    for name, ne, ttype, raw in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ttype, offset)
        pad = (-len(raw)) % align
        data += raw + b"\0" * pad
        offset += len(raw) + pad
    out += b"\0" * ((-len(out)) % align)
    return out + data


def main(folder):
    os.makedirs(folder, exist_ok=True)
    tokens = ["<unk>", "<s>", "</s>", "\u2581the", "\u2581In", "a", "b"] + ["<0x%02X>" % i for i in range(256)]
    arr_str = struct.pack("<IQ", 8, len(tokens)) + b"".join(s(t) for t in tokens)
    arr_f32 = struct.pack("<IQ", 6, len(tokens)) + b"".join(struct.pack("<f", -i) for i in range(len(tokens)))
    kvs = [
        ("general.architecture", 8, s("llama")),
        ("llama.embedding_length", 4, struct.pack("<I", 32)),
        ("llama.block_count", 4, struct.pack("<I", 1)),
        ("llama.feed_forward_length", 4, struct.pack("<I", 64)),
        ("llama.attention.head_count", 4, struct.pack("<I", 4)),
        ("llama.context_length", 4, struct.pack("<I", 64)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("tokenizer.ggml.model", 8, s("llama")),
        ("tokenizer.ggml.tokens", 9, arr_str),
        ("tokenizer.ggml.scores", 9, arr_f32),
        ("tokenizer.ggml.add_bos_token", 7, b"\x01"),
        ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
    ]
    tensors = [
        ("token_embd.weight", [32, 4], 0, b"\x01" * 512),
        ("blk.0.attn_q.weight", [32, 2], 8, b"\x02" * 68),
        ("blk.0.ffn_down.weight", [256], 12, b"\x03" * 144),
    ]
    with open(os.path.join(folder, "seed-model.gguf"), "wb") as f:
        f.write(gguf(kvs, tensors))
    # A complete 1-layer model (dim 32, 4 heads, 2 KV heads, FFN 64) over the seed vocabulary, so
    # that mutations start from a file that binds and runs a forward step.
    n_vocab = len(tokens)
    dim, ffn, kv = 32, 64, 16

    def f32(n, v=0.5):
        return struct.pack("<%df" % n, *([v] * n))

    def f16(n):
        return struct.pack("<%de" % n, *[((i * 7919) % 97 - 48) / 64.0 for i in range(n)])

    def q8_0(rows, cols):
        block = struct.pack("<e", 0.01) + bytes((i * 37) % 255 for i in range(32))
        return block * (rows * cols // 32)

    model_kvs = [kv_ for kv_ in kvs if not kv_[0].startswith("llama.")] + [
        ("llama.embedding_length", 4, struct.pack("<I", dim)),
        ("llama.block_count", 4, struct.pack("<I", 1)),
        ("llama.feed_forward_length", 4, struct.pack("<I", ffn)),
        ("llama.attention.head_count", 4, struct.pack("<I", 4)),
        ("llama.attention.head_count_kv", 4, struct.pack("<I", 2)),
        ("llama.context_length", 4, struct.pack("<I", 64)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
    ]
    model_tensors = [
        ("token_embd.weight", [dim, n_vocab], 1, f16(dim * n_vocab)),
        ("output_norm.weight", [dim], 0, f32(dim, 1.0)),
        ("blk.0.attn_norm.weight", [dim], 0, f32(dim, 1.0)),
        ("blk.0.ffn_norm.weight", [dim], 0, f32(dim, 1.0)),
        ("blk.0.attn_q.weight", [dim, dim], 8, q8_0(dim, dim)),
        ("blk.0.attn_k.weight", [dim, kv], 8, q8_0(kv, dim)),
        ("blk.0.attn_v.weight", [dim, kv], 8, q8_0(kv, dim)),
        ("blk.0.attn_output.weight", [dim, dim], 8, q8_0(dim, dim)),
        ("blk.0.ffn_gate.weight", [dim, ffn], 8, q8_0(ffn, dim)),
        ("blk.0.ffn_up.weight", [dim, ffn], 8, q8_0(ffn, dim)),
        ("blk.0.ffn_down.weight", [ffn, dim], 8, q8_0(dim, ffn)),
    ]
    with open(os.path.join(folder, "seed-full-model.gguf"), "wb") as f:
        f.write(gguf(model_kvs, model_tensors))
    with open(os.path.join(folder, "seed-align.gguf"), "wb") as f:
        f.write(gguf([("general.alignment", 4, struct.pack("<I", 64))], tensors[:1], align=64))
    with open(os.path.join(folder, "seed-empty.gguf"), "wb") as f:
        f.write(gguf([], []))


if __name__ == "__main__":
    main(sys.argv[1])
