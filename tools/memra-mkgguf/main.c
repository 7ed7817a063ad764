/* memra-mkgguf: write a synthetic Llama-family GGUF model (seeded random weights, byte-level BPE vocab),
 * or dump a GGUF file's metadata and tensor checksums (--dump, used by tools/ref/check_gguf.py to compare
 * memra's reader and dequantizers with the gguf python package). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/gguf_synth.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-mkgguf -o OUT.gguf [--arch llama|qwen2] [--layers L] [--embd E] [--heads H]\n"
            "                    [--kv-heads K] [--ff F] [--vocab V] [--ctx C] [--type T] [--embd-type T]\n"
            "                    [--seed S] [--tied] [--version 2|3]\n"
            "       memra-mkgguf --dump FILE.gguf\n"
            "T is one of f32 f16 bf16 q4_0 q4_1 q8_0 q4_K q5_K q6_K. Defaults: llama, 4 layers, embd 64, 4 heads,\n"
            "2 kv heads, ff 128, vocab 300, ctx 256, q4_1 weights, q8_0 embeddings, seed 1, untied, v3.\n");
}

static int parse_type(const char *s, int *t)
{
    static const int types[] = {KRN_F32, KRN_F16, KRN_BF16, KRN_Q4_0, KRN_Q4_1, KRN_Q8_0, KRN_Q4_K, KRN_Q5_K,
                                KRN_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcasecmp(s, krn_type_name(types[i])) == 0) {
            *t = types[i];
            return 0;
        }
    return -1;
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    if (errno || end == s || *end || *v < lo || *v > hi) {
        fprintf(stderr, "memra-mkgguf: %s '%s': expected an integer in %lld..%lld\n", opt, s, lo, hi);
        return -1;
    }
    return 0;
}

/* Print the header and, per tensor, name type dims and the double sum / sum of squares of its values. */
static int dump(const char *path)
{
    dev_err err = {0};
    mdl_gguf *g = mdl_gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "memra-mkgguf: %s\n", err.msg);
        return 1;
    }
    printf("version %d\nalignment %u\ndata_offset %zu\nkv %d\ntensors %d\n", mdl_gguf_version(g),
           mdl_gguf_alignment(g), mdl_gguf_data_offset(g), mdl_gguf_kv_count(g), mdl_gguf_tensor_count(g));
    for (int i = 0; i < mdl_gguf_kv_count(g); i++) {
        const char *k = mdl_gguf_kv_key(g, i);
        const int t = mdl_gguf_kv_type(g, i);
        printf("key %s %s", k, mdl_gguf_type_name(t));
        if (t == MDL_GGUF_ARRAY) {
            int et;
            uint64_t n;
            mdl_gguf_get_arr(g, k, &et, &n, &err);
            printf(" %s %" PRIu64, mdl_gguf_type_name(et), n);
        } else if (t == MDL_GGUF_STRING) {
            const char *s;
            size_t n;
            mdl_gguf_get_str(g, k, &s, &n, &err);
            printf(" %zu", n);
        }
        printf("\n");
    }
    int rc = 0;
    for (int i = 0; i < mdl_gguf_tensor_count(g); i++) {
        const mdl_gguf_tensor *t = mdl_gguf_tensor_at(g, i);
        const int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        float *row = malloc(sizeof(float) * (size_t)n);
        if (!row) {
            rc = 1;
            break;
        }
        double sum = 0, sq = 0;
        const size_t rb = krn_row_bytes(t->type, n);
        for (int64_t r = 0; r < rows; r++) {
            krn_dequant_row(t->type, (const char *)t->data + (size_t)r * rb, row, n);
            for (int64_t j = 0; j < n; j++) {
                sum += row[j];
                sq += (double)row[j] * row[j];
            }
        }
        free(row);
        printf("tensor %s %s %lld %lld %lld %lld %" PRIu64 " %.17g %.17g\n", t->name, krn_type_name(t->type),
               (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], t->offset, sum,
               sq);
    }
    mdl_gguf_close(g);
    return rc;
}

int main(int argc, char **argv)
{
    mdl_gguf_synth p;
    mdl_gguf_synth_defaults(&p);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied")) {
            p.tied = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "memra-mkgguf: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--dump"))
            return dump(v);
        else if (!strcmp(a, "-o"))
            out = v;
        else if (!strcmp(a, "--arch"))
            p.arch = v;
        else if (!strcmp(a, "--type") || !strcmp(a, "--embd-type")) {
            int t;
            if (parse_type(v, &t)) {
                fprintf(stderr, "memra-mkgguf: %s '%s': allowed f32 f16 bf16 q4_0 q4_1 q8_0 q4_K q5_K q6_K\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--type"))
                p.type = t;
            else
                p.embd_type = t;
        } else {
            static const struct { const char *name; long long lo, hi; } opts[] = {
                {"--layers", 1, 4096}, {"--embd", 1, 1 << 20}, {"--heads", 1, 4096}, {"--kv-heads", 1, 4096},
                {"--ff", 1, 1 << 22}, {"--vocab", 259, 1 << 22}, {"--ctx", 1, 1 << 24},
                {"--seed", 0, INT64_MAX}, {"--version", 2, 3}};
            int k = -1;
            for (int j = 0; j < (int)(sizeof opts / sizeof opts[0]); j++)
                if (!strcmp(a, opts[j].name))
                    k = j;
            if (k < 0) {
                fprintf(stderr, "memra-mkgguf: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
            if (parse_int(a, v, opts[k].lo, opts[k].hi, &x))
                return 2;
            switch (k) {
            case 0: p.n_layer = (int)x; break;
            case 1: p.n_embd = (int)x; break;
            case 2: p.n_head = (int)x; break;
            case 3: p.n_head_kv = (int)x; break;
            case 4: p.n_ff = (int)x; break;
            case 5: p.n_vocab = (int)x; break;
            case 6: p.n_ctx = (int)x; break;
            case 7: p.seed = (uint64_t)x; break;
            default: p.version = (uint32_t)x; break;
            }
        }
    }
    if (!out) {
        fprintf(stderr, "memra-mkgguf: -o OUT.gguf is required\n");
        usage(stderr);
        return 2;
    }
    dev_err err = {0};
    if (mdl_gguf_synth_write(out, &p, &err) != 0) {
        fprintf(stderr, "memra-mkgguf: %s\n", err.msg);
        return 1;
    }
    return 0;
}
