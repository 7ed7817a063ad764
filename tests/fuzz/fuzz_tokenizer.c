/* libFuzzer target: tokenizing arbitrary bytes. Two tokenizers are built once: the synthetic model's
 * byte-level BPE vocab (model/gguf_synth: SmolLM2-like, 256 byte symbols, learned merges, control tokens)
 * and a tiny SentencePiece vocab built here (<0xXX> byte tokens, U+2581 words, a user-defined token). Input:
 * byte 0 picks the tokenizer (bit 0), add_special (bit 1), parse_special (bit 2) and a small output cap
 * (bit 3: the -(needed) path); the rest is the text. Checked: no crash or sanitizer report; a result that
 * fits is a list of ids in the vocab whose count matches a second call's; detokenize and token_to_piece run
 * on them. Seeds: tests/fuzz/tokenizer/. Run by scripts/fuzz. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/gguf_synth.h"
#include "model/gguf_write.h"
#include "model/tokenizer.h"
#include "model/vocab_gguf.h"

static mdl_tokenizer *tok[2];

static mdl_tokenizer *bpe_from_synth(void)
{
    dev_err err = {0};
    mdl_gguf_synth p;
    mdl_gguf_synth_defaults(&p);
    p.n_layer = 1;
    p.n_vocab = 400;
    p.pre = "smollm";
    const int fd = memfd_create("memra-fuzz-tok", 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    mdl_gguf *g = NULL;
    mdl_tokenizer *t = NULL;
    if (fd >= 0 && mdl_gguf_synth_write(path, &p, &err) == 0 && (g = mdl_gguf_open(path, &err)))
        t = mdl_tokenizer_from_gguf(g, &err);
    if (!t)
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
    mdl_gguf_close(g);
    if (fd >= 0)
        close(fd);
    return t;
}

static mdl_tokenizer *spm_tiny(void)
{
    enum { NB = 256, NW = 12 };
    static char texts[3 + NB + NW][24];
    static const char *toks[3 + NB + NW];
    static int32_t types[3 + NB + NW];
    static float scores[3 + NB + NW];
    static const char *const words[NW] = {"\xE2\x96\x81", "\xE2\x96\x81the", ("\xE2\x96\x81" "a"), "th", "he", "e",
                                          "t", "h", "a", "\xE2\x96\x81hello", "<user>", "\xE2\x96\x81\xC3\xA9"};
    int n = 0;
    static const char *const special[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) {
        snprintf(texts[n], sizeof texts[n], "%s", special[i]);
        types[n] = i ? MDL_TOKEN_CONTROL : MDL_TOKEN_UNKNOWN;
    }
    for (int b = 0; b < NB; b++, n++) {
        snprintf(texts[n], sizeof texts[n], "<0x%02X>", b);
        types[n] = MDL_TOKEN_BYTE;
    }
    for (int i = 0; i < NW; i++, n++) {
        snprintf(texts[n], sizeof texts[n], "%s", words[i]);
        types[n] = strcmp(words[i], "<user>") == 0 ? MDL_TOKEN_USER_DEFINED : MDL_TOKEN_NORMAL;
        scores[n] = -(float)i;
    }
    for (int i = 0; i < n; i++)
        toks[i] = texts[i];
    mdl_vocab_src src;
    mdl_vocab_src_init(&src);
    src.model = "llama";
    src.n_tokens = (uint32_t)n;
    src.tokens = toks;
    src.token_types = types;
    src.scores = scores;
    src.unk = 0, src.bos = 1, src.eos = 2;
    dev_err err = {0};
    mdl_tokenizer *t = mdl_tokenizer_create(&src, &err);
    if (!t)
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (!(tok[0] = bpe_from_synth()) || !(tok[1] = spm_tiny()))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const mdl_tokenizer *t = tok[data[0] & 1];
    const int add = (data[0] >> 1) & 1, parse = (data[0] >> 2) & 1, small = (data[0] >> 3) & 1;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    const int big = 3 * (int)len + 8; /* room for any text: a byte without a token becomes U+FFFD's 3 ids */
    const int cap = small ? 3 : big;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids)
        return 0;
    const int n = mdl_tokenize(t, text, len, add, parse, ids, cap);
    if (n > cap || (n < 0 && (!small || n != -(cap + 1))))
        __builtin_trap(); /* past the cap, or a text that did not fit the room any text fits, or not -(cap + 1) */
    if (small && n < 0) { /* cap 0 gives -(needed); a call with that room gives exactly that many */
        const int need = -mdl_tokenize(t, text, len, add, parse, ids, 0);
        int32_t *all = need > cap && need <= big ? malloc(sizeof(int32_t) * (size_t)need) : NULL;
        if (!all || mdl_tokenize(t, text, len, add, parse, all, need) != need)
            __builtin_trap();
        free(all);
    }
    const int nv = mdl_tokenizer_n_vocab(t);
    char piece[256], *buf = malloc(4 * len + 64);
    for (int i = 0; n > 0 && i < n && i < cap; i++) {
        if (ids[i] < 0 || ids[i] >= nv)
            __builtin_trap();
        (void)mdl_token_to_piece(t, ids[i], piece, sizeof piece, parse);
    }
    if (buf && n > 0)
        (void)mdl_detokenize(t, ids, n, buf, (int)(4 * len + 64), parse);
    free(buf);
    free(ids);
    return 0;
}
