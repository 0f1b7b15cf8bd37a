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
    with open(os.path.join(folder, "seed-align.gguf"), "wb") as f:
        f.write(gguf([("general.alignment", 4, struct.pack("<I", 64))], tensors[:1], align=64))
    with open(os.path.join(folder, "seed-empty.gguf"), "wb") as f:
        f.write(gguf([], []))


if __name__ == "__main__":
    main(sys.argv[1])
