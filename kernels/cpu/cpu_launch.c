/* Launch wrappers of the CPU kernels: each copies its args into a dev_launch_cpu_async op and declares
 * every buffer it touches with its byte range and mode. The backend checks peer grants and stream order
 * against this list and counts remote reads from it, so it must be exact:
 *   - a matmul declares its whole weight (n_out * row_bytes), x and y;
 *   - embed_rows reads table rows chosen by the device-side tokens: it declares the whole table (n_out *
 *     row_bytes), the tokens and y;
 *   - kv_store / attention touch cache rows chosen by the device-side seq/pos values, which do not exist
 *     yet at enqueue time: they declare the WHOLE cache (its allocation from the base to its end, asked of
 *     the backend with dev_alloc_extent; each layer's K and V are allocations of their own), so any op on
 *     any sequence's slab that no event orders against them is reported (conservative across sequences).
 * No shared state. */
#include "kernels/cpu/krn_cpu.h"
#include "kernels/quant_batch.h"

/* An access list; the same range named twice (in-place ops: y == x) is merged into one entry whose mode
 * is the union, so the checker sees one read-write access and not two conflicting ones. */
typedef struct acc_list { dev_access a[DEV_ACCESS_MAX]; int n; } acc_list;

static void acc_add(acc_list *l, const void *p, size_t bytes, int mode)
{
    for (int i = 0; i < l->n; i++)
        if (l->a[i].ptr == p && l->a[i].bytes == bytes) {
            l->a[i].mode |= mode;
            return;
        }
    l->a[l->n++] = (dev_access){ .ptr = p, .bytes = bytes, .mode = mode };
}

#define F32B(count) ((size_t)(count) * sizeof(float))
#define I32B(count) ((size_t)(count) * sizeof(int32_t))

/* Bytes of a KV cache from its base: the whole allocation; one sequence slab if the backend cannot tell. */
static size_t cache_bytes(dev_stream *s, const void *cache, int type, size_t slab_elems)
{
    size_t n = dev_alloc_extent(dev_device_platform(dev_stream_device(s)), cache);
    return n ? n : slab_elems * krn_kv_elem_bytes(type);
}

/* dev_cpu_fn trampolines: the backend hands back its private copy of the args. */
static void run_rmsnorm(void *p) { krn_cpu_rmsnorm(p); }
static void run_matmul(void *p) { krn_cpu_matmul(p); }
static void run_add_bias(void *p) { krn_cpu_add_bias(p); }
static void run_rope(void *p) { krn_cpu_rope(p); }
static void run_kv_store(void *p) { krn_cpu_kv_store(p); }
static void run_attention(void *p) { krn_cpu_attention(p); }
static void run_swiglu(void *p) { krn_cpu_swiglu(p); }
static void run_add(void *p) { krn_cpu_add(p); }
static void run_argmax(void *p) { krn_cpu_argmax(p); }
static void run_embed_rows(void *p) { krn_cpu_embed_rows(p); }
typedef struct quantize_x8_args { void *xq; const void *x; int xt, B, n; } quantize_x8_args;
static void run_quantize_x8(void *p)
{
    const quantize_x8_args *a = p;
    krn_x8_quantize_t_host(a->xq, a->x, a->xt, a->B, a->n);
}

/* Bytes of count activations of type t. */
static size_t act_bytes(int t, size_t count) { return count * krn_act_bytes(t); }

int krn_cpu_rmsnorm_t_async(dev_stream *s, void *y, int yt, const float *x, const float *w, int B, int n, float eps)
{
    krn_cpu_rmsnorm_args a = { y, x, w, B, n, eps, yt };
    acc_list l = { .n = 0 };
    acc_add(&l, x, F32B((size_t)B * n), DEV_READ);
    acc_add(&l, w, F32B(n), DEV_READ);
    acc_add(&l, y, act_bytes(yt, (size_t)B * n), DEV_WRITE);
    return dev_launch_cpu_async(s, "rmsnorm", run_rmsnorm, &a, sizeof a, l.a, l.n);
}

static int cpu_matmul(dev_stream *s, float *y, const krn_weight *W, const void *x, int xt, int B, int acc)
{
    const size_t rb = krn_row_bytes(W->type, W->n_in);
    const dev_platform *pl = dev_device_platform(dev_stream_device(s));
    const int x8 = dev_platform_matmul_x8(pl) && krn_x8_type_ok(W->type) &&
                   W->n_in % 32 == 0; /* the platform's mode (MEMRA_CPU_X8), for the types it covers */
    krn_cpu_matmul_args a = { y, W->data, x, W->type, W->n_out, W->n_in, B, rb, acc, xt, x8, W->layout,
                              dev_platform_cpu_threads(pl) };
    acc_list l = { .n = 0 };
    acc_add(&l, W->data, rb * (size_t)W->n_out, DEV_READ);
    acc_add(&l, x, act_bytes(xt, (size_t)B * W->n_in), DEV_READ);
    acc_add(&l, y, F32B((size_t)B * W->n_out), acc ? DEV_RW : DEV_WRITE);
    return dev_launch_cpu_async(s, acc ? "matmul_acc" : "matmul", run_matmul, &a, sizeof a, l.a, l.n);
}

int krn_cpu_matmul_async(dev_stream *s, float *y, const krn_weight *W, const float *x, int B)
{
    return cpu_matmul(s, y, W, x, KRN_F32, B, 0);
}

/* One op per part: the CPU has no launch cost to save. */
int krn_cpu_matmul_parts_x_async(dev_stream *s, const krn_mm_part *parts, int n, const krn_mm_x *x, int B)
{
    for (int i = 0; i < n; i++) {
        int rc = cpu_matmul(s, parts[i].y, parts[i].W, x->x, x->type, B, 0);
        if (rc)
            return rc;
    }
    return 0;
}

int krn_cpu_matmul_acc_x_async(dev_stream *s, float *y, const krn_weight *W, const krn_mm_x *x, int B)
{
    return cpu_matmul(s, y, W, x->x, x->type, B, 1);
}

int krn_cpu_add_bias_async(dev_stream *s, float *y, const float *bias, int B, int n)
{
    krn_cpu_add_bias_args a = { y, bias, B, n };
    acc_list l = { .n = 0 };
    acc_add(&l, bias, F32B(n), DEV_READ);
    acc_add(&l, y, F32B((size_t)B * n), DEV_RW);
    return dev_launch_cpu_async(s, "add_bias", run_add_bias, &a, sizeof a, l.a, l.n);
}

int krn_cpu_rope_async(dev_stream *s, float *x, const int32_t *pos, int B, int n_heads, int head_dim, int n_rot,
                       float freq_base, float freq_scale, int neox)
{
    krn_cpu_rope_args a = { x, pos, B, n_heads, head_dim, n_rot, freq_base, freq_scale, neox };
    acc_list l = { .n = 0 };
    acc_add(&l, pos, I32B(B), DEV_READ);
    acc_add(&l, x, F32B((size_t)B * n_heads * head_dim), DEV_RW);
    return dev_launch_cpu_async(s, "rope", run_rope, &a, sizeof a, l.a, l.n);
}

int krn_cpu_kv_store_async(dev_stream *s, const krn_kv_cache *c, const float *k, const float *v,
                           const int32_t *seq, const int32_t *pos, int B, int kv_dim, int n_ctx)
{
    krn_cpu_kv_store_args a = { *c, k, v, seq, pos, B, kv_dim, n_ctx };
    acc_list l = { .n = 0 };
    acc_add(&l, k, F32B((size_t)B * kv_dim), DEV_READ);
    acc_add(&l, v, F32B((size_t)B * kv_dim), DEV_READ);
    acc_add(&l, seq, I32B(B), DEV_READ);
    acc_add(&l, pos, I32B(B), DEV_READ);
    /* the whole caches: see the top of this file */
    acc_add(&l, c->k, cache_bytes(s, c->k, c->type, (size_t)n_ctx * kv_dim), DEV_WRITE);
    acc_add(&l, c->v, cache_bytes(s, c->v, c->type, (size_t)n_ctx * kv_dim), DEV_WRITE);
    return dev_launch_cpu_async(s, "kv_store", run_kv_store, &a, sizeof a, l.a, l.n);
}

int krn_cpu_attention_t_async(dev_stream *s, void *out, int out_t, const float *q, const krn_kv_cache *c,
                              const int32_t *seq, const int32_t *pos, int B, int n_head, int n_head_kv, int head_dim,
                              int n_ctx)
{
    krn_cpu_attention_args a = { out, q, *c, seq, pos, B, n_head, n_head_kv, head_dim, n_ctx, out_t };
    const size_t kv_dim = (size_t)n_head_kv * head_dim;
    acc_list l = { .n = 0 };
    acc_add(&l, q, F32B((size_t)B * n_head * head_dim), DEV_READ);
    acc_add(&l, seq, I32B(B), DEV_READ);
    acc_add(&l, pos, I32B(B), DEV_READ);
    /* the whole caches: see the top of this file */
    acc_add(&l, c->k, cache_bytes(s, c->k, c->type, (size_t)n_ctx * kv_dim), DEV_READ);
    acc_add(&l, c->v, cache_bytes(s, c->v, c->type, (size_t)n_ctx * kv_dim), DEV_READ);
    acc_add(&l, out, act_bytes(out_t, (size_t)B * n_head * head_dim), DEV_WRITE);
    return dev_launch_cpu_async(s, "attention", run_attention, &a, sizeof a, l.a, l.n);
}

int krn_cpu_swiglu_t_async(dev_stream *s, void *y, int yt, const float *gate, const float *up, int B, int n)
{
    krn_cpu_swiglu_args a = { y, gate, up, B, n, yt };
    acc_list l = { .n = 0 };
    acc_add(&l, gate, F32B((size_t)B * n), DEV_READ);
    acc_add(&l, up, F32B((size_t)B * n), DEV_READ);
    acc_add(&l, y, act_bytes(yt, (size_t)B * n), DEV_WRITE);
    return dev_launch_cpu_async(s, "swiglu", run_swiglu, &a, sizeof a, l.a, l.n);
}

int krn_cpu_add_async(dev_stream *s, float *y, const float *x, int B, int n)
{
    krn_cpu_add_args a = { y, x, B, n };
    acc_list l = { .n = 0 };
    acc_add(&l, x, F32B((size_t)B * n), DEV_READ);
    acc_add(&l, y, F32B((size_t)B * n), DEV_RW);
    return dev_launch_cpu_async(s, "add", run_add, &a, sizeof a, l.a, l.n);
}

int krn_cpu_argmax_async(dev_stream *s, int32_t *out, int32_t *dup, const int32_t *dup_at, int n_dup, const float *x,
                         int B, int n)
{
    krn_cpu_argmax_args a = { out, dup, dup_at, dup ? n_dup : 0, x, B, n };
    acc_list l = { .n = 0 };
    acc_add(&l, x, F32B((size_t)B * n), DEV_READ);
    acc_add(&l, out, I32B(B), DEV_WRITE);
    if (dup) /* with indices, any of the n_dup slots: the checker sees the whole array written */
        acc_add(&l, dup, I32B(dup_at ? n_dup : B), DEV_WRITE);
    if (dup_at)
        acc_add(&l, dup_at, I32B(B), DEV_READ);
    return dev_launch_cpu_async(s, "argmax", run_argmax, &a, sizeof a, l.a, l.n);
}

int krn_cpu_embed_rows_async(dev_stream *s, float *y, const krn_weight *T, const int32_t *tokens, int B)
{
    const size_t rb = krn_row_bytes(T->type, T->n_in);
    krn_cpu_embed_rows_args a = { y, T->data, tokens, T->type, T->n_out, T->n_in, B, rb };
    acc_list l = { .n = 0 };
    acc_add(&l, T->data, rb * (size_t)T->n_out, DEV_READ); /* the whole table: see the top of this file */
    acc_add(&l, tokens, I32B(B), DEV_READ);
    acc_add(&l, y, F32B((size_t)B * T->n_in), DEV_WRITE);
    return dev_launch_cpu_async(s, "embed_rows", run_embed_rows, &a, sizeof a, l.a, l.n);
}

int krn_cpu_quantize_x8_t_async(dev_stream *s, void *xq, const void *x, int xt, int B, int n)
{
    quantize_x8_args a = { xq, x, xt, B, n };
    acc_list l = { .n = 0 };
    acc_add(&l, x, act_bytes(xt, (size_t)B * n), DEV_READ);
    acc_add(&l, xq, (size_t)B * krn_x8_row_bytes(n), DEV_WRITE);
    return dev_launch_cpu_async(s, "quantize_x8", run_quantize_x8, &a, sizeof a, l.a, l.n);
}

int krn_cpu_rope_store_async(dev_stream *s, const krn_rope_store *a)
{
    int rc = krn_cpu_rope_async(s, a->q, a->pos, a->B, a->n_head, a->head_dim, a->n_rot, a->freq_base,
                                a->freq_scale, a->neox);
    if (!rc)
        rc = krn_cpu_rope_async(s, a->k, a->pos, a->B, a->n_head_kv, a->head_dim, a->n_rot, a->freq_base,
                                a->freq_scale, a->neox);
    if (!rc)
        rc = krn_cpu_kv_store_async(s, &a->cache, a->k, a->v, a->seq, a->pos, a->B,
                                    a->n_head_kv * a->head_dim, a->n_ctx);
    return rc;
}
