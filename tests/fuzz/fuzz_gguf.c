/* libFuzzer target: the GGUF reader and everything that reads an opened file's header. Each input is a whole
 * file (written to a memfd, opened through /proc/self/fd/N as a path, as a user's file is). An input that
 * opens is walked: every key through its typed getter, the first elements of every array, the first row of
 * every small tensor dequantized; then the hparams (mdl_hparams_read), the tokenizer (mdl_tokenizer_from_gguf,
 * which tokenizes a short text) and mdl_model_load on a one-device CPU platform. Contract checked: no crash,
 * no sanitizer report, and every refusal carries a message. Seeds: tests/fuzz/gguf/. Run by scripts/fuzz. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/dev.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "model/vocab_gguf.h"

static int fd = -1;
static char path[64];
static dev_platform *plat;

/* A refusal must say why: a failing call with an empty message is a bug the fuzzer reports as a crash. */
static void need_msg(int rc, const dev_err *err)
{
    if (rc < 0 && err->msg[0] == '\0')
        __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fd = memfd_create("memra-fuzz-gguf", 0);
    if (fd < 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    dev_err err = {0};
    if (!(plat = dev_platform_open(DEV_KIND_CPU, 1, &err)))
        abort();
    return 0;
}

static void walk(const mdl_gguf *g)
{
    dev_err err = {0};
    for (int i = 0; i < mdl_gguf_kv_count(g); i++) {
        const char *key = mdl_gguf_kv_key(g, i);
        uint32_t u;
        int64_t v;
        float f;
        int b, et;
        const char *s;
        size_t len;
        uint64_t n;
        need_msg(mdl_gguf_get_u32(g, key, &u, &err), &err);
        need_msg(mdl_gguf_get_i64(g, key, &v, &err), &err);
        need_msg(mdl_gguf_get_f32(g, key, &f, &err), &err);
        need_msg(mdl_gguf_get_bool(g, key, &b, &err), &err);
        need_msg(mdl_gguf_get_str(g, key, &s, &len, &err), &err);
        if (mdl_gguf_get_arr(g, key, &et, &n, &err) == 0) {
            for (uint64_t j = 0; j < n && j < 4; j++)
                if (mdl_gguf_arr_str(g, key, j, &s, &len) == 0 && len)
                    (void)*(volatile const char *)(s + len - 1); /* the last byte: ASan checks it */
            const void *d = mdl_gguf_arr_data(g, key);
            if (d && n && mdl_gguf_scalar_size(et))
                (void)*(volatile const uint8_t *)((const uint8_t *)d + n * mdl_gguf_scalar_size(et) - 1);
        }
    }
    static float row[4096];
    for (int i = 0; i < mdl_gguf_tensor_count(g); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(g, i);
        if (t->ne[0] <= 4096 && t->bytes)
            krn_dequant_row(t->type, t->data, row, t->ne[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(path, &err);
    if (!g) {
        need_msg(err.code ? err.code : -1, &err);
        return 0;
    }
    walk(g);
    mdl_hparams hp;
    err = (dev_err){0};
    need_msg(mdl_hparams_read(g, &hp, &err), &err);
    if (mdl_gguf_find(g, "tokenizer.ggml.model") >= 0) {
        err = (dev_err){0};
        mdl_tokenizer *t = mdl_tokenizer_from_gguf(g, &err);
        if (!t) {
            need_msg(err.code ? err.code : -1, &err);
        } else {
            int32_t ids[64];
            static const char text[] = "Hello, world! <|im_start|>user\n\xc3\xa9t\xc3\xa9 12345 \xff\xfe";
            const int n = mdl_tokenize(t, text, sizeof text - 1, 1, 1, ids, 64);
            char buf[512];
            if (n > 0)
                (void)mdl_detokenize(t, ids, n, buf, sizeof buf, 1);
            mdl_tokenizer_destroy(t);
        }
    }
    mdl_gguf_close(g);
    err = (dev_err){0};
    mdl_load_params lp = {.platform = plat};
    mdl_model *m = mdl_model_load(path, &lp, &err);
    if (!m) {
        need_msg(err.code ? err.code : -1, &err);
        return 0;
    }
    const int32_t tok[2] = {0, mdl_model_hparams(m)->n_vocab - 1};
    float *x = malloc(sizeof(float) * 2 * (size_t)mdl_model_hparams(m)->n_embd);
    if (x && mdl_embed_rows(m, tok, 2, x, &err) != 0)
        need_msg(err.code ? err.code : -1, &err);
    free(x);
    mdl_model_free(m);
    return 0;
}
