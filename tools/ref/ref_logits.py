#!/usr/bin/env python3
"""Independent oracle for the real model: SmolLM2 logits from the `gguf` package + numpy, float64.

Nothing here shares code with memra: the weights are dequantized by gguf.quants.dequantize, the Llama
forward is written below in numpy float64 (full causal recompute every step, no KV cache), and the prompt
token ids come from a HuggingFace `tokenizers` ByteLevel BPE built from the GGUF's own vocab + merges
(the SmolLM2 pre-tokenizer: split digits, then byte-level). The ids are written to the output, so the C
test feeds exactly these ids and does not depend on our tokenizer.

For each prompt: logits after the prompt, then greedy-decode 7 more tokens (8 logit vectors per prompt).
Output (text, one record per step):
  Q <prompt index> <text>                          the prompt text (rest of the line)
  P <prompt index> <n tokens> <ids...>             the prompt's token ids
  S <prompt> <step> <fed token> <argmax> <logsumexp> <mean> <std>
  T <id>:<logit> x20                                top-20 ids by logit, descending
  F <id>:<logit> x64                                fixed probe ids (every 768th id), for max-abs diff
Usage: ref_logits.py MODEL.gguf OUT.txt
"""
import sys

import numpy as np
import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):",
]
STEPS = 8
TOPK = 20
PROBE_STRIDE = 768


def field(r, key):
    f = r.fields[key]
    return f.contents()


def main(path, out_path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    assert arch == "llama", arch
    n_layer = field(r, f"{arch}.block_count")
    n_head = field(r, f"{arch}.attention.head_count")
    n_head_kv = field(r, f"{arch}.attention.head_count_kv")
    n_embd = field(r, f"{arch}.embedding_length")
    eps = field(r, f"{arch}.attention.layer_norm_rms_epsilon")
    base = field(r, f"{arch}.rope.freq_base")
    hd = n_embd // n_head

    tensors = {t.name: t for t in r.tensors}

    def W(name):
        t = tensors[name]
        return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)

    emb = W("token_embd.weight")  # (n_vocab, n_embd)
    out_w = W("output.weight") if "output.weight" in tensors else emb
    layers = []
    for il in range(n_layer):
        p = f"blk.{il}."
        layers.append({k: W(p + k + ".weight") for k in
                       ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                        "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]})
    out_norm = W("output_norm.weight")

    # tokenizer from the GGUF vocab/merges
    toks = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(toks)}
    tk = Tokenizer(models.BPE(vocab, merges))
    tk.decoder = decoders.ByteLevel()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, T):  # x (T, heads, hd); llama (GGUF) layout: pairs (2i, 2i+1)
        i = np.arange(hd // 2)
        theta = np.arange(T)[:, None] * base ** (-2.0 * i / hd)[None, :]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x0 * s + x1 * c
        return y

    def forward(ids):  # returns the logits of the last position
        T = len(ids)
        x = emb[ids]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        g = n_head // n_head_kv
        for L in layers:
            h = rms(x, L["attn_norm"])
            q = rope((h @ L["attn_q"].T).reshape(T, n_head, hd), T)
            k = rope((h @ L["attn_k"].T).reshape(T, n_head_kv, hd), T)
            v = (h @ L["attn_v"].T).reshape(T, n_head_kv, hd)
            att = np.empty((T, n_head, hd))
            for hh in range(n_head):
                sc = q[:, hh, :] @ k[:, hh // g, :].T / np.sqrt(hd) + mask
                sc = np.exp(sc - sc.max(axis=1, keepdims=True))
                sc /= sc.sum(axis=1, keepdims=True)
                att[:, hh, :] = sc @ v[:, hh // g, :]
            x = x + att.reshape(T, n_embd) @ L["attn_output"].T
            h = rms(x, L["ffn_norm"])
            gt = h @ L["ffn_gate"].T
            x = x + ((gt / (1 + np.exp(-gt))) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
        return rms(x[-1], out_norm) @ out_w.T

    with open(out_path, "w") as f:
        f.write(f"# SmolLM2 float64 numpy oracle: {path.split('/')[-1]}; {len(PROMPTS)} prompts x {STEPS} "
                f"greedy steps; prompt ids from a tokenizers BPE over the GGUF vocab\n")
        for pi, prompt in enumerate(PROMPTS):
            ids = tk.encode(prompt).ids
            f.write(f"Q {pi} {prompt}\n")
            f.write(f"P {pi} {len(ids)} {' '.join(map(str, ids))}\n")
            seq = list(ids)
            for st in range(STEPS):
                lg = forward(seq)
                am = int(np.argmax(lg))
                lse = float(np.log(np.sum(np.exp(lg - lg.max()))) + lg.max())
                f.write(f"S {pi} {st} {seq[-1]} {am} {lse:.6f} {lg.mean():.6f} {lg.std():.6f}\n")
                top = np.argsort(-lg, kind="stable")[:TOPK]
                f.write("T " + " ".join(f"{i}:{lg[i]:.6f}" for i in top) + "\n")
                probes = range(0, len(lg), PROBE_STRIDE)
                f.write("F " + " ".join(f"{i}:{lg[i]:.6f}" for i in probes) + "\n")
                seq.append(am)
            print(f"prompt {pi}: {prompt!r} -> {tk.decode(seq[len(ids):])!r}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
