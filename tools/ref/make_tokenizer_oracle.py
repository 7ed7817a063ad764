#!/usr/bin/env python3
"""Write the tokenizer and chat-template oracles committed under tests/data/, from HF code only.

  python3 tools/ref/make_tokenizer_oracle.py [--gguf PATH] [--out tests/data]

SmolLM2 (byte-level BPE): HF transformers builds the tokenizer FROM THE GGUF's vocab, merges and token
types (transformers.integrations.gguf: byte_level_tokenizer + add_gguf_special_tokens, the path
AutoTokenizer.from_pretrained(gguf_file=...) takes; called directly because that loader imports torch).
transformers maps no pre-tokenizer for tokenizer.ggml.pre='smollm', so the script sets the one SmolLM2's
tokenizer.json declares: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)]. Ids are encode(text, add_special_tokens=False) (HF matches special tokens in text).
  -> tokenizer_oracle_smollm2.txt: one line of space-separated ids per corpus case
     (tokenizer_corpus.txt, then the generated tokenizer_corpus_random.txt).

SentencePiece (tiny synthetic vocab, no model needed): transformers' sentencepiece_tokenizer builds a
LlamaTokenizer (BPE with byte fallback, merges derived from scores) from a GGUF-shaped dict, with the
Llama-2 tokenizer.json normalizer (see spm_oracle).
  -> tokenizer_oracle_spm.txt: the vocab ("tok <id> <type> <score> <escaped text>") then one
     "ids <escaped text> :: <ids>" line per case.

Pre-tokenizers: HF's word splits of the same corpus for pre = gpt2, smollm, llama-bpe, qwen2, tekken
  -> tokenizer_oracle_pretok.txt ("pre <name> <case> <byte length of each word>").

Chat: transformers' apply_chat_template (jinja) over the GGUF's tokenizer.chat_template.
  -> chat_oracle_smollm2.txt: "case <name> <add_generation_prompt> <n>", n "msg <role> <escaped>"
     lines, then "out <escaped rendering>".
"""
import argparse
import os
import sys

import gguf
from tokenizers import normalizers, pre_tokenizers
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    add_gguf_special_tokens, byte_level_tokenizer, sentencepiece_tokenizer)


def unescape(line):
    out = bytearray()
    i = 0
    b = line.encode("utf-8")
    while i < len(b):
        c = b[i]
        if c == 0x5C and i + 1 < len(b):  # backslash
            n = chr(b[i + 1])
            if n == "n":
                out.append(10); i += 2; continue
            if n == "t":
                out.append(9); i += 2; continue
            if n == "r":
                out.append(13); i += 2; continue
            if n == "\\":
                out.append(0x5C); i += 2; continue
            if n == "x":
                out.append(int(b[i + 2:i + 4], 16)); i += 4; continue
        out.append(c)
        i += 1
    return bytes(out)


def escape(text):
    """The corpus escaping of a str: \\n \\t \\r \\\\ and \\xHH for other ASCII controls."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    m = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}
    return "".join(m.get(c) or ("\\x%02X" % ord(c) if ord(c) < 32 or ord(c) == 127 else c) for c in text)


def read_corpus(path):
    cases = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                continue
            cases.append(unescape(line))
    return cases


def random_cases(n, seed=20261130):
    """Fixed-seed random mixes of the corpus's hard parts (scripts, digits, whitespace, markers)."""
    import random
    rnd = random.Random(seed)
    parts = ["hello", "World", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "123", "4567890", "3.14", "-",
             "'s", "'LL", "don't", "café", "naïve", "中文", "日本語", "한국어", "Привет", "😀", "👍🏽", "🇫🇷",
             "!", "?!", "...", "()", "{}", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "_", "#",
             "\u00a0", "\u3000", "\u2028", "e\u0301", "٣", "①", "$", "€", "\x0b", "x", "Z", "ß", "ﬁ"]
    out = []
    for _ in range(n):
        k = rnd.randint(1, 12)
        out.append("".join(rnd.choice(parts) for _ in range(k)).encode("utf-8"))
    return out


def gguf_strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[j]).decode("utf-8") for j in f.data]


def gguf_ints(r, key):
    f = r.fields[key]
    return [int(f.parts[j][0]) for j in f.data]


def smollm2_oracle(gguf_path, cases, out_dir):
    r = gguf.GGUFReader(gguf_path)
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    d = {"tokenizer_type": "gpt2", "tokens": gguf_strings(r, "tokenizer.ggml.tokens"),
         "merges": gguf_strings(r, "tokenizer.ggml.merges"),
         "token_type": gguf_ints(r, "tokenizer.ggml.token_type")}
    tok = add_gguf_special_tokens(byte_level_tokenizer(d), d)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    with open(os.path.join(out_dir, "tokenizer_oracle_smollm2.txt"), "w") as f:
        for text in cases:
            ids = tok.encode(text.decode("utf-8"), add_special_tokens=False)
            f.write(" ".join(map(str, ids)) + "\n")

    tmpl = bytes(r.fields["tokenizer.chat_template"].parts[-1]).decode()
    tok.chat_template = tmpl
    convs = [
        ("user_only", True, [("user", "Hello!")]),
        ("user_only_no_prompt", False, [("user", "What is 2+2?")]),
        ("with_system", True, [("system", "You are terse."), ("user", "Hi")]),
        ("multi_turn", True, [("user", "Hi"), ("assistant", "Hello! How can I help?"),
                              ("user", "Tell me a joke.\nMake it short.")]),
        ("system_multi_turn", False, [("system", "Be kind."), ("user", "a"), ("assistant", "b")]),
        ("assistant_first", True, [("assistant", "I speak first"), ("user", "ok")]),
        ("empty_content", True, [("user", "")]),
        ("unicode", True, [("user", "café 😀 中文\ttab")]),
    ]
    with open(os.path.join(out_dir, "chat_oracle_smollm2.txt"), "w") as f:
        for name, gen, msgs in convs:
            outs = tok.apply_chat_template([{"role": ro, "content": c} for ro, c in msgs], tokenize=False,
                                           add_generation_prompt=gen)
            f.write("case %s %d %d\n" % (name, 1 if gen else 0, len(msgs)))
            for ro, c in msgs:
                f.write("msg %s %s\n" % (ro, escape(c)))
            f.write("out %s\n" % escape(outs))


def pretok_oracle(cases, out_dir):
    """Word splits of every corpus case by HF pre-tokenizers, per tokenizer.ggml.pre value: the regexes as
    the models' tokenizer.json files write them (case-insensitive groups kept), run by HF's engine."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import _LLAMA3_SPLIT, _TEKKEN_SPLIT
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_SPLIT
    from tokenizers import Regex
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    pres = [
        ("gpt2", byte_level, True),
        ("smollm", pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), True),
        ("llama-bpe", pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"), False),
        ("qwen2", pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), False),
        ("tekken", pre_tokenizers.Split(Regex(_TEKKEN_SPLIT), behavior="isolated"), False),
    ]
    with open(os.path.join(out_dir, "tokenizer_oracle_pretok.txt"), "w") as f:
        f.write("# pre <name> <case index> <byte length of each word>, from HF pre_tokenize_str\n")
        for name, pt, is_byte_level in pres:
            for i, text in enumerate(cases):
                words = pt.pre_tokenize_str(text.decode("utf-8"))
                # byte-level output spells one byte per character; Split keeps the text as is
                lens = [len(w) if is_byte_level else len(w.encode("utf-8")) for w, _ in words]
                assert sum(lens) == len(text), (name, i)
                f.write("pre %s %d %s\n" % (name, i, " ".join(map(str, lens))))


# A small SentencePiece vocab: control/unknown tokens, the 256 byte tokens, then pieces with scores.
SPM_PIECES = ["▁", "e", "t", "a", "o", "h", "l", "r", "n", "s", "w", "d", "i", "c", "H", "W", "u", "g", "!",
              ",", "é", "▁t", "he", "▁the", "ll", "llo", "▁he", "▁hello", "▁w", "or", "▁wor", "▁world", "in",
              "ing", "▁s", "st", "▁st", "ri", "▁str", "▁string", "an", "▁an", "▁and", "es", "er", "▁c", "ca",
              "▁ca", "af", "caf", "▁caf", "▁café", "He", "Hello", "▁Hello", "▁W", "▁Wor", "▁World", "▁▁", "▁▁▁", "f"]
# Every piece that two pieces concatenate to should have both parts in the vocab (as in a trained
# model): HF derives merges only from such pairs, sentencepiece/llama.cpp merge any pair whose
# concatenation is a piece; the two agree on closed vocabs like this one.
SPM_CASES = ["hello world", "Hello World!", "the string and the hello", "  two spaces", "café",
             "unknown ß char", "", "a", "tab\there", "emoji 😀", "héllo", "hello  world   end ",
             "<s>hello</s>", "le\nline"]


def spm_oracle(out_dir):
    tokens, types, scores = ["<unk>", "<s>", "</s>"], [2, 3, 3], [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append("<0x%02X>" % b); types.append(6); scores.append(0.0)
    for i, p in enumerate(SPM_PIECES):
        tokens.append(p); types.append(1); scores.append(-float(i))
    d = {"tokenizer_type": "llama", "tokens": tokens, "scores": scores, "token_type": types}
    tok = add_gguf_special_tokens(sentencepiece_tokenizer(d), d)
    # The Llama-2 tokenizer.json layout (sentencepiece's add_dummy_prefix): prepend U+2581 to every text
    # segment between special tokens, even one that already starts with a space. transformers' default
    # Metaspace(prepend_scheme="first") skips the prefix when the text starts with a space and after a
    # special token, which sentencepiece and llama.cpp do not.
    tok.backend_tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend(prepend="\u2581"), normalizers.Replace(pattern=" ", content="\u2581")])
    tok.backend_tokenizer.pre_tokenizer = None
    with open(os.path.join(out_dir, "tokenizer_oracle_spm.txt"), "w") as f:
        for i, (t, ty, s) in enumerate(zip(tokens, types, scores)):
            f.write("tok %d %d %g %s\n" % (i, ty, s, escape(t)))
        for text in SPM_CASES:
            ids = tok.encode(text, add_special_tokens=False)
            f.write("ids %s :: %s\n" % (escape(text), " ".join(map(str, ids))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.expanduser("~/.cache/memra/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))
    a = ap.parse_args()
    cases = read_corpus(os.path.join(a.out, "tokenizer_corpus.txt"))
    with open(os.path.join(a.out, "tokenizer_corpus_random.txt"), "w", encoding="utf-8") as f:
        f.write("# Generated by tools/ref/make_tokenizer_oracle.py (random_cases, fixed seed); same escaping.\n")
        for c in random_cases(300):
            f.write(escape(c) + "\n")
    cases += read_corpus(os.path.join(a.out, "tokenizer_corpus_random.txt"))
    smollm2_oracle(a.gguf, cases, a.out)
    pretok_oracle(cases, a.out)
    spm_oracle(a.out)
    print("wrote oracles for %d corpus cases to %s" % (len(cases), a.out), file=sys.stderr)


if __name__ == "__main__":
    main()
