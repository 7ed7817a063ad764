/* memra-bench decode: single-stage CPU throughput of the model engine on one stream (no pipeline):
 * prefill of P prompt tokens in chunks of C rows, then D greedy decode steps (argmax on the device, the
 * token read back and embedded on the host, as a real decode loop does). Prints a table; asserts nothing.
 * State: all local to bench_decode (one thread + the backend's stream worker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "kernels/krn.h"
#include "model/llama.h"
#include "bench.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-bench decode [-m MODEL.gguf] [-p PROMPT_TOKENS=128] [-n DECODE_TOKENS=64] "
               "[-c CHUNK_ROWS=32]\n  MODEL defaults to $MEMRA_MODEL. Runs on the CPU backend, one device, "
               "one stream.\n");
}

/* Parse a positive int flag value; 0 on success. */
static int pos_int(const char *flag, const char *v, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x <= 0 || x > 1 << 20) {
        fprintf(stderr, "memra-bench decode: %s %s: expected an integer in 1..1048576\n", flag, v ? v : "(none)");
        return -1;
    }
    *out = (int)x;
    return 0;
}

int bench_decode(int argc, char **argv)
{
    const char *path = getenv("MEMRA_MODEL");
    int P = 128, D = 64, C = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") && v) {
            path = v;
            i++;
        } else if (!strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "-c")) {
            if (pos_int(a, v, a[1] == 'p' ? &P : a[1] == 'n' ? &D : &C))
                return 2;
            i++;
        } else {
            fprintf(stderr, "memra-bench decode: unknown or incomplete flag '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "memra-bench decode: no model: pass -m MODEL.gguf or set MEMRA_MODEL\n");
        return 2;
    }

    int rc = 1;
    dev_err err = { 0 };
    dev_platform *p = dev_platform_open(DEV_KIND_CPU, 1, &err);
    int x8 = 0, threads = 1; /* MEMRA_CPU_X8: the fast matmul (unset: exact); MEMRA_CPU_THREADS (unset: 1) */
    if (p && (dev_cpu_x8_door(&x8, &err) < 0 || dev_cpu_threads_door(&threads, &err) < 0)) {
        dev_platform_close(p);
        p = NULL;
    }
    if (p) {
        dev_platform_set_matmul_x8(p, x8);
        dev_platform_set_cpu_threads(p, threads);
    }
    mdl_model *m = NULL;
    mdl_kv *kv = NULL;
    mdl_scratch *sc = NULL;
    dev_stream *s = NULL;
    float *x_d = NULL, *logits_d = NULL, *x_h = NULL;
    int32_t *pos_d = NULL, *seq_d = NULL, *am_d = NULL, *ids_h = NULL;
    if (!p || !(m = mdl_model_load(path, &(mdl_load_params){ .platform = p }, &err)))
        goto out;
    const mdl_hparams *hp = mdl_model_hparams(m);
    dev_device *d = dev_platform_device(p, 0);
    const int n_ctx = P + D;
    int kv_type;
    if (mdl_kv_type_from_env(&kv_type, &err) != 0 || !(kv = mdl_kv_create(m, NULL, 1, n_ctx, kv_type, &err)) || !(sc = mdl_scratch_create(m, d, C, &err)) ||
        !(s = dev_stream_create(d, "bench", &err)) ||
        !(x_d = dev_malloc(d, sizeof(float) * C * hp->n_embd, &err)) ||
        !(logits_d = dev_malloc(d, sizeof(float) * hp->n_vocab, &err)) ||
        !(pos_d = dev_malloc(d, sizeof(int32_t) * C, &err)) || !(seq_d = dev_malloc(d, sizeof(int32_t) * C, &err)) ||
        !(am_d = dev_malloc(d, sizeof(int32_t), &err)) ||
        !(x_h = dev_host_alloc(p, sizeof(float) * C * hp->n_embd, &err)) ||
        !(ids_h = dev_host_alloc(p, sizeof(int32_t) * (2 * C + 1), &err)))
        goto out;
    int32_t *pos_h = ids_h + C, *tok_h = ids_h + 2 * C; /* pinned: positions, the decoded token */
    /* prompt: a fixed pseudo-random token sequence (the speed does not depend on the ids) */
    uint32_t r = 12345;
    const double t0 = bench_now_s();
    for (int i = 0; i < P; i += C) {
        const int B = P - i < C ? P - i : C;
        int32_t toks[C];
        for (int b = 0; b < B; b++) {
            r = r * 1103515245u + 12345u;
            toks[b] = (int32_t)((r >> 8) % (uint32_t)hp->n_vocab);
            pos_h[b] = i + b;
            ids_h[b] = 0;
        }
        if (mdl_embed_rows(m, toks, B, x_h, &err) || dev_copy_h2d_async(s, x_d, x_h, sizeof(float) * B * hp->n_embd) ||
            dev_copy_h2d_async(s, pos_d, pos_h, sizeof(int32_t) * B) ||
            dev_copy_h2d_async(s, seq_d, ids_h, sizeof(int32_t) * B) ||
            mdl_forward_layers_async(m, kv, sc, s, x_d, pos_d, seq_d, B, i + B, 0, hp->n_layer, &err) ||
            (i + B == P && mdl_forward_head_async(m, sc, s, x_d + (size_t)(B - 1) * hp->n_embd, logits_d, 1, &err)) ||
            (i + B == P && krn_argmax_async(s, am_d, logits_d, 1, hp->n_vocab)) ||
            (i + B == P && dev_copy_d2h_async(s, tok_h, am_d, sizeof(int32_t))) || dev_stream_sync(s, &err))
            goto out;
    }
    const double t1 = bench_now_s();
    for (int t = 0; t < D; t++) {
        pos_h[0] = P + t;
        ids_h[0] = 0;
        if (mdl_embed_rows(m, tok_h, 1, x_h, &err) || dev_copy_h2d_async(s, x_d, x_h, sizeof(float) * hp->n_embd) ||
            dev_copy_h2d_async(s, pos_d, pos_h, sizeof(int32_t)) || dev_copy_h2d_async(s, seq_d, ids_h, sizeof(int32_t)) ||
            mdl_forward_layers_async(m, kv, sc, s, x_d, pos_d, seq_d, 1, P + t + 1, 0, hp->n_layer, &err) ||
            mdl_forward_head_async(m, sc, s, x_d, logits_d, 1, &err) || krn_argmax_async(s, am_d, logits_d, 1, hp->n_vocab) ||
            dev_copy_d2h_async(s, tok_h, am_d, sizeof(int32_t)) || dev_stream_sync(s, &err))
            goto out;
    }
    const double t2 = bench_now_s();
    printf("memra-bench decode: %s (%s, %d layers, n_embd %d), CPU backend, 1 stream, chunk %d rows, %s matmul, %d "
           "thread%s per matmul\n", path, mdl_model_arch_name(m), hp->n_layer, hp->n_embd, C,
           x8 ? "fast (MEMRA_CPU_X8=1)" : "exact", threads, threads > 1 ? "s" : "");
    printf("| phase   | tokens | seconds | tokens/s |\n|---------|-------:|--------:|---------:|\n");
    printf("| prefill | %6d | %7.3f | %8.2f |\n", P, t1 - t0, P / (t1 - t0));
    printf("| decode  | %6d | %7.3f | %8.2f |\n", D, t2 - t1, D / (t2 - t1));
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "memra-bench decode: %s: %s\n", memra_status_str(err.code), err.msg);
    if (s)
        dev_stream_destroy(s);
    if (x_h)
        dev_host_free(p, x_h);
    if (ids_h)
        dev_host_free(p, ids_h);
    if (m) {
        dev_device *d0 = dev_platform_device(p, 0);
        dev_free(d0, x_d);
        dev_free(d0, logits_d);
        dev_free(d0, pos_d);
        dev_free(d0, seq_d);
        dev_free(d0, am_d);
    }
    mdl_scratch_destroy(sc);
    mdl_kv_destroy(kv);
    mdl_model_free(m);
    if (p)
        dev_platform_close(p);
    return rc;
}

/* Until the lead's memra-bench main (which dispatches `memra-bench decode ...` here) lands in this folder,
 * this weak main makes the tool usable on its own; a strong main elsewhere in the folder wins at link. */
__attribute__((weak)) int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "decode"))
        return bench_decode(argc - 1, argv + 1);
    return bench_decode(argc, argv);
}
