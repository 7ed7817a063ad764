/* GGUF writer: three growing byte buffers (metadata, tensor infos, tensor data) joined at save.
 * No shared mutable state beyond the writer, which one thread uses at a time. */
#include "model/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "model/gguf.h"

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

struct mdl_gguf_writer {
    dev_err err;        /* the first error (sticky) */
    uint32_t version, alignment;
    uint64_t n_kv, n_tensors;
    buf kv, ti, data;   /* encoded metadata, tensor infos, tensor data (offsets relative to data start) */
    char **names;       /* keys and tensor names added so far (duplicate check); n_names of them */
    size_t n_names, cap_names;
};

static int put(mdl_gguf_writer *w, buf *b, const void *p, size_t n)
{
    if (w->err.code)
        return w->err.code;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return dev_err_set(&w->err, MEMRA_E_NOMEM, "gguf writer: out of memory growing to %zu bytes", cap);
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_u32(mdl_gguf_writer *w, buf *b, uint32_t v) { return put(w, b, &v, 4); }
static int put_u64(mdl_gguf_writer *w, buf *b, uint64_t v) { return put(w, b, &v, 8); }
static int put_str(mdl_gguf_writer *w, buf *b, const char *s, size_t n)
{
    put_u64(w, b, n);
    return put(w, b, s, n);
}

mdl_gguf_writer *mdl_gguf_writer_create(dev_err *err)
{
    mdl_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        dev_err_set(err, MEMRA_E_NOMEM, "gguf writer: out of memory");
        return NULL;
    }
    w->version = 3;
    w->alignment = MDL_GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void mdl_gguf_writer_destroy(mdl_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_names; i++)
        free(w->names[i]);
    free(w->names);
    free(w->kv.p);
    free(w->ti.p);
    free(w->data.p);
    free(w);
}

/* Record a new key or tensor name (what = "key" / "tensor"); a repeat or an empty name is an error. */
static int add_name(mdl_gguf_writer *w, const char *what, const char *name)
{
    if (w->err.code)
        return w->err.code;
    if (!name || !*name)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: empty %s name", what);
    for (size_t i = 0; i < w->n_names; i++)
        if (strcmp(w->names[i] + 1, name) == 0 && w->names[i][0] == what[0])
            return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: %s '%s' added twice", what, name);
    if (w->n_names == w->cap_names) {
        const size_t cap = w->cap_names ? 2 * w->cap_names : 64;
        char **q = realloc(w->names, cap * sizeof *q);
        if (!q)
            return dev_err_set(&w->err, MEMRA_E_NOMEM, "gguf writer: out of memory");
        w->names = q;
        w->cap_names = cap;
    }
    const size_t n = strlen(name);
    char *s = malloc(n + 2);
    if (!s)
        return dev_err_set(&w->err, MEMRA_E_NOMEM, "gguf writer: out of memory");
    s[0] = what[0]; /* 'k' or 't': keys and tensor names live in separate namespaces */
    memcpy(s + 1, name, n + 1);
    w->names[w->n_names++] = s;
    return 0;
}

int mdl_gguf_writer_set_version(mdl_gguf_writer *w, uint32_t version)
{
    if (w->err.code)
        return w->err.code;
    if (version != 2 && version != 3)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: version %u (allowed 2 or 3)", version);
    w->version = version;
    return 0;
}

int mdl_gguf_writer_raw(mdl_gguf_writer *w, const char *key, uint32_t type, const void *bytes, size_t len)
{
    if (add_name(w, "key", key))
        return w->err.code;
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, type);
    put(w, &w->kv, bytes, len);
    if (!w->err.code)
        w->n_kv++;
    return w->err.code;
}

int mdl_gguf_writer_set_alignment(mdl_gguf_writer *w, uint32_t alignment)
{
    if (w->err.code)
        return w->err.code;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || w->n_tensors > 0)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: alignment %u must be a power of two, set before "
                           "any tensor", alignment);
    w->alignment = alignment;
    return alignment == MDL_GGUF_DEFAULT_ALIGNMENT ? 0 : mdl_gguf_writer_u32(w, "general.alignment", alignment);
}

#define SCALAR(NAME, CT, TYPE)                                                                  \
    int mdl_gguf_writer_##NAME(mdl_gguf_writer *w, const char *key, CT v)                       \
    {                                                                                            \
        return mdl_gguf_writer_raw(w, key, TYPE, &v, sizeof v);                                  \
    }
SCALAR(u8, uint8_t, MDL_GGUF_U8)
SCALAR(i8, int8_t, MDL_GGUF_I8)
SCALAR(u16, uint16_t, MDL_GGUF_U16)
SCALAR(i16, int16_t, MDL_GGUF_I16)
SCALAR(u32, uint32_t, MDL_GGUF_U32)
SCALAR(i32, int32_t, MDL_GGUF_I32)
SCALAR(u64, uint64_t, MDL_GGUF_U64)
SCALAR(i64, int64_t, MDL_GGUF_I64)
SCALAR(f32, float, MDL_GGUF_F32)
SCALAR(f64, double, MDL_GGUF_F64)

int mdl_gguf_writer_bool(mdl_gguf_writer *w, const char *key, int v)
{
    const uint8_t b = v != 0;
    return mdl_gguf_writer_raw(w, key, MDL_GGUF_BOOL, &b, 1);
}

int mdl_gguf_writer_str(mdl_gguf_writer *w, const char *key, const char *s)
{
    if (add_name(w, "key", key))
        return w->err.code;
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, MDL_GGUF_STRING);
    put_str(w, &w->kv, s, strlen(s));
    if (!w->err.code)
        w->n_kv++;
    return w->err.code;
}

int mdl_gguf_writer_arr(mdl_gguf_writer *w, const char *key, int elem_type, const void *data, uint64_t n)
{
    const size_t es = mdl_gguf_scalar_size(elem_type);
    if (w->err.code)
        return w->err.code;
    if (es == 0)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: key '%s': element type %d is not numeric",
                           key, elem_type);
    if (add_name(w, "key", key))
        return w->err.code;
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, MDL_GGUF_ARRAY);
    put_u32(w, &w->kv, (uint32_t)elem_type);
    put_u64(w, &w->kv, n);
    put(w, &w->kv, data, (size_t)n * es);
    if (!w->err.code)
        w->n_kv++;
    return w->err.code;
}

int mdl_gguf_writer_arr_str(mdl_gguf_writer *w, const char *key, const char *const *s, uint64_t n)
{
    if (add_name(w, "key", key))
        return w->err.code;
    put_str(w, &w->kv, key, strlen(key));
    put_u32(w, &w->kv, MDL_GGUF_ARRAY);
    put_u32(w, &w->kv, MDL_GGUF_STRING);
    put_u64(w, &w->kv, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(w, &w->kv, s[i], strlen(s[i]));
    if (!w->err.code)
        w->n_kv++;
    return w->err.code;
}

/* Shape checks shared by both tensor adders; *bytes = the tensor's encoded size. */
static int check_shape(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                       size_t *bytes, int64_t *count)
{
    if (w->err.code)
        return w->err.code;
    if (!krn_type_supported(type))
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: tensor '%s': type %d unsupported", name, type);
    if (n_dims < 1 || n_dims > MDL_GGUF_MAX_DIMS)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: tensor '%s': n_dims %d (allowed 1..4)", name,
                           n_dims);
    *count = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0 || ne[d] > (int64_t)1 << 40)
            return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: tensor '%s': dim %d = %lld", name, d,
                               (long long)ne[d]);
        *count *= ne[d];
    }
    const size_t rb = krn_row_bytes(type, ne[0]);
    if (rb == 0)
        return dev_err_set(&w->err, MEMRA_E_INVAL, "gguf writer: tensor '%s': row length %lld is not a multiple "
                           "of the %s block (%d)", name, (long long)ne[0], krn_type_name(type),
                           krn_type_block_elems(type));
    *bytes = rb * (size_t)(*count / ne[0]);
    return 0;
}

/* Append the tensor info and reserve its aligned data; returns the data destination or NULL. */
static uint8_t *add_tensor(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                           size_t bytes)
{
    if (add_name(w, "tensor", name))
        return NULL;
    static const uint8_t zeros[256];
    size_t pad = (w->alignment - w->data.len % w->alignment) % w->alignment;
    while (pad > 0 && !w->err.code) {
        const size_t n = pad < sizeof zeros ? pad : sizeof zeros;
        put(w, &w->data, zeros, n);
        pad -= n;
    }
    const uint64_t offset = w->data.len;
    put_str(w, &w->ti, name, strlen(name));
    put_u32(w, &w->ti, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++)
        put_u64(w, &w->ti, (uint64_t)ne[d]);
    put_u32(w, &w->ti, (uint32_t)type);
    put_u64(w, &w->ti, offset);
    if (w->err.code)
        return NULL;
    const size_t at = w->data.len;
    /* grow by `bytes` (contents filled by the caller) */
    if (w->data.len + bytes > w->data.cap) {
        size_t cap = w->data.cap ? w->data.cap : 4096;
        while (cap < w->data.len + bytes)
            cap *= 2;
        uint8_t *q = realloc(w->data.p, cap);
        if (!q) {
            dev_err_set(&w->err, MEMRA_E_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
            return NULL;
        }
        w->data.p = q;
        w->data.cap = cap;
    }
    w->data.len += bytes;
    w->n_tensors++;
    return w->data.p + at;
}

int mdl_gguf_writer_tensor_raw(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                               const void *data)
{
    size_t bytes;
    int64_t count;
    if (check_shape(w, name, type, n_dims, ne, &bytes, &count))
        return w->err.code;
    uint8_t *dst = add_tensor(w, name, type, n_dims, ne, bytes);
    if (dst)
        memcpy(dst, data, bytes);
    return w->err.code;
}

int mdl_gguf_writer_tensor_f32(mdl_gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                               const float *src)
{
    size_t bytes;
    int64_t count;
    if (check_shape(w, name, type, n_dims, ne, &bytes, &count))
        return w->err.code;
    uint8_t *dst = add_tensor(w, name, type, n_dims, ne, bytes);
    if (!dst)
        return w->err.code;
    const size_t rb = krn_row_bytes(type, ne[0]);
    for (int64_t r = 0; r < count / ne[0]; r++)
        krn_quant_row(type, src + r * ne[0], dst + (size_t)r * rb, ne[0]);
    return 0;
}

int mdl_gguf_writer_error(const mdl_gguf_writer *w, dev_err *err)
{
    if (w->err.code)
        dev_err_set(err, w->err.code, "%s", w->err.msg);
    return w->err.code;
}

int mdl_gguf_writer_to_mem(mdl_gguf_writer *w, void **out, size_t *len, dev_err *err)
{
    if (w->err.code)
        return mdl_gguf_writer_error(w, err);
    const size_t head = 24 + w->kv.len + w->ti.len;
    const size_t data_off = (head + w->alignment - 1) / w->alignment * w->alignment;
    const size_t total = data_off + w->data.len;
    uint8_t *p = calloc(1, total ? total : 1);
    if (!p)
        return dev_err_set(err, MEMRA_E_NOMEM, "gguf writer: out of memory for a %zu-byte file", total);
    memcpy(p, "GGUF", 4);
    memcpy(p + 4, &w->version, 4);
    memcpy(p + 8, &w->n_tensors, 8);
    memcpy(p + 16, &w->n_kv, 8);
    if (w->kv.len)
        memcpy(p + 24, w->kv.p, w->kv.len);
    if (w->ti.len)
        memcpy(p + 24 + w->kv.len, w->ti.p, w->ti.len);
    if (w->data.len)
        memcpy(p + data_off, w->data.p, w->data.len);
    *out = p;
    *len = total;
    return 0;
}

int mdl_gguf_writer_save(mdl_gguf_writer *w, const char *path, dev_err *err)
{
    void *p = NULL;
    size_t n = 0;
    int rc = mdl_gguf_writer_to_mem(w, &p, &n, err);
    if (rc)
        return rc;
    FILE *f = fopen(path, "wb");
    if (!f) {
        rc = dev_err_set(err, MEMRA_E_IO, "%s: cannot create: %s", path, strerror(errno));
    } else {
        if (fwrite(p, 1, n, f) != n)
            rc = dev_err_set(err, MEMRA_E_IO, "%s: write failed: %s", path, strerror(errno));
        if (fclose(f) != 0 && rc == 0)
            rc = dev_err_set(err, MEMRA_E_IO, "%s: close failed: %s", path, strerror(errno));
    }
    free(p);
    return rc;
}
