/* The load-time repack of weights on their owning device (model/repack.h). Called by
 * model/loader.c (load_layer, load_head) and model/synth_model.c, on the loading thread, before the model
 * is handed to anyone: the weights it rewrites are not read by any other stream yet. No shared state. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/repack.h"
#include "kernels/quant_impl.h"

/* A 0/1 door: *on = dflt when unset, else its value; anything else MEMRA_E_INVAL naming the variable and both
 * values (what_dflt: what the default does; what_other: the other value). */
static int door01(const char *name, int dflt, const char *what_dflt, const char *what_other, int *on, dev_err *err)
{
    const char *v = getenv(name);
    if (!v || (!strcmp(v, "0") || !strcmp(v, "1"))) {
        *on = v ? v[0] == '1' : dflt;
        return 0;
    }
    return dev_err_set(err, MEMRA_E_INVAL, "%s=\"%s\": allowed %d (%s, the default) or %d (%s)", name, v, dflt,
                       what_dflt, !dflt, what_other);
}

int mdl_repack_door(int *on, dev_err *err)
{
    return door01("MEMRA_CUDA_REPACK", 1, "repack q8_0/q4_0/q4_1/q4_K/q6_K to planes on the owning GPU",
                  "keep GGUF blocks", on, err);
}

int mdl_x8_door(int *on, dev_err *err)
{
    return door01("MEMRA_CUDA_X8", 0, "f32 x for every matmul",
                  "x quantized to int8 per 32-block for the planar q8_0/q4_0/q4_1/q4_K/q6_K matmuls on a GPU", on,
                  err);
}

/* Whether w is repacked: a planar type, still in blocks, 16-byte aligned; q6_K only with x8 on, since only the
 * int8-x GEMV gains on its planes (8B q6_k decode, docs/cuda-kernels.md "Planar layouts": blocks 248.8 tok/s, planes with
 * f32 x 188.6, planes with int8 x 275.5). */
static int wants(const krn_weight *w, int x8)
{
    return w && w->data && w->layout == KRN_LAYOUT_BLOCKS && w->n_out > 0 && (x8 || w->type != KRN_Q6_K) &&
           krn_planes_qrow(w->type, w->n_in) && (uintptr_t)w->data % 16 == 0; /* qrow 0: a type without planes */
}

static size_t bytes_of(const krn_weight *w) { return (size_t)w->n_out * krn_row_bytes(w->type, w->n_in); }

int mdl_cpu_repack_door(int *on, dev_err *err)
{
    return door01("MEMRA_CPU_REPACK", 1, "q4_0/q4_1/q8_0 repacked to rows of 8 on a CPU device",
                  "keep GGUF blocks", on, err);
}

/* Whether w takes rows of 8: still in blocks, a shape the layout takes; in the exact mode (x8 = 0) only where
 * krn_rows8_exact runs (AVX2), as elsewhere the exact dot would unpack every group on every call. */
static int wants_rows8(const krn_weight *w, int x8)
{
    return w && w->data && w->layout == KRN_LAYOUT_BLOCKS && krn_rows8_supported(w->type, w->n_out, w->n_in) &&
           (x8 || krn_quant_path() == KRN_PATH_AVX2);
}

int mdl_repack_weights(dev_device *d, krn_weight *const *ws, int n, dev_err *err)
{
    int on_cuda = 1, on_cpu = 1, x8 = 0, rc = mdl_repack_door(&on_cuda, err); /* both doors: a bad one fails anywhere */
    if (rc || (rc = mdl_cpu_repack_door(&on_cpu, err)) != 0 || (rc = mdl_x8_door(&x8, err)) != 0)
        return rc;
    if (!d)
        return 0;
    const int cuda = dev_platform_kind(dev_device_platform(d)) == DEV_KIND_CUDA;
    if (!(cuda ? on_cuda : on_cpu))
        return 0;
    const int cpu_x8 = !cuda && dev_platform_matmul_x8(dev_device_platform(d));
    size_t most = 0;
    for (int i = 0; i < n; i++)
        if ((cuda ? wants(ws[i], x8) : wants_rows8(ws[i], cpu_x8)) && bytes_of(ws[i]) > most)
            most = bytes_of(ws[i]);
    if (!most)
        return 0;
    void *scratch = dev_malloc(d, most, err);
    if (!scratch)
        return dev_err_wrap(err, "repack scratch of %zu bytes on %s", most, dev_device_name(d));
    dev_stream *s = dev_stream_create(d, "repack", err);
    if (!s) {
        dev_free(d, scratch);
        return err ? err->code : MEMRA_E_DEVICE;
    }
    /* one stream: each tensor's copy into the scratch is ordered after the previous repack read it */
    for (int i = 0; i < n && !rc; i++) {
        krn_weight *w = ws[i];
        if (!(cuda ? wants(w, x8) : wants_rows8(w, cpu_x8)))
            continue;
        krn_weight src = *w;
        src.data = scratch;
        if ((rc = dev_copy_d2d_async(s, scratch, w->data, bytes_of(w))) == 0)
            rc = cuda ? krn_repack_async(s, w, &src) : krn_repack_rows8_async(s, w, &src);
        if (rc)
            dev_err_set(err, rc, "repack of a (%d, %d) %s tensor on %s failed", w->n_out, w->n_in,
                        krn_type_name(w->type), dev_device_name(d));
    }
    int rs = dev_stream_sync(s, err); /* the planes are written before the scratch is freed or any read */
    rc = rc ? rc : rs;
    dev_stream_destroy(s);
    dev_free(d, scratch);
    return rc;
}
