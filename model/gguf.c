/* GGUF reader: map the file, validate every byte of the header, index keys, string arrays and tensors.
 * Layout (GGUF v2/v3, little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x (string key,
 * u32 type, value), n_tensors x (string name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset), padding
 * to general.alignment, the data section. A string is u64 length + bytes; an array is u32 element type +
 * u64 count + elements. No shared mutable state (an opened file is immutable). */
#include "model/gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/quant.h"

#define GGUF_MAGIC "GGUF"
#define MIN_KV_BYTES 13      /* u64 key length + 1 key byte + u32 type + 1 value byte */
#define MIN_TENSOR_BYTES 33  /* u64 name length + 1 + u32 n_dims + u64 dim + u32 type + u64 offset */

typedef struct rd {
    const char *path;
    const uint8_t *b;
    size_t size, pos;
    dev_err *err;
} rd;

static int rd_fail(rd *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rd_fail(rd *r, int code, const char *fmt, ...)
{
    char msg[DEV_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dev_err_set(r->err, code, "%s: %s (at byte %zu of %zu)", r->path, msg, r->pos, r->size);
}

static size_t left(const rd *r) { return r->size - r->pos; }

static int rd_take(rd *r, uint64_t n, const char *what, const uint8_t **p)
{
    if (n > left(r))
        return rd_fail(r, MEMRA_E_FORMAT, "truncated: %s needs %llu bytes, %zu left", what,
                       (unsigned long long)n, left(r));
    *p = r->b + r->pos;
    r->pos += (size_t)n;
    return 0;
}

static int rd_u32(rd *r, const char *what, uint32_t *v)
{
    const uint8_t *p = NULL;
    int rc = rd_take(r, 4, what, &p);
    if (rc == 0)
        memcpy(v, p, 4);
    return rc;
}

static int rd_u64(rd *r, const char *what, uint64_t *v)
{
    const uint8_t *p = NULL;
    int rc = rd_take(r, 8, what, &p);
    if (rc == 0)
        memcpy(v, p, 8);
    return rc;
}

static int rd_str(rd *r, const char *what, const uint8_t **s, uint64_t *len)
{
    int rc = rd_u64(r, what, len);
    if (rc)
        return rc;
    if (*len > left(r))
        return rd_fail(r, MEMRA_E_FORMAT, "%s: string length %llu runs past the end of the file (%zu bytes left)",
                       what, (unsigned long long)*len, left(r));
    return rd_take(r, *len, what, s);
}

/* A key or tensor name: non-empty, no NUL byte; returns an owned NUL-terminated copy in *out. */
static int rd_name(rd *r, const char *what, char **out)
{
    const uint8_t *s;
    uint64_t len;
    int rc = rd_str(r, what, &s, &len);
    if (rc)
        return rc;
    if (len == 0)
        return rd_fail(r, MEMRA_E_FORMAT, "%s is empty", what);
    if (memchr(s, 0, (size_t)len))
        return rd_fail(r, MEMRA_E_FORMAT, "%s contains a NUL byte", what);
    *out = malloc((size_t)len + 1);
    if (!*out)
        return dev_err_set(r->err, MEMRA_E_NOMEM, "%s: out of memory for a %llu-byte name", r->path,
                           (unsigned long long)len);
    memcpy(*out, s, (size_t)len);
    (*out)[len] = '\0';
    return 0;
}

size_t mdl_gguf_scalar_size(int type)
{
    switch (type) {
    case MDL_GGUF_U8: case MDL_GGUF_I8: case MDL_GGUF_BOOL: return 1;
    case MDL_GGUF_U16: case MDL_GGUF_I16: return 2;
    case MDL_GGUF_U32: case MDL_GGUF_I32: case MDL_GGUF_F32: return 4;
    case MDL_GGUF_U64: case MDL_GGUF_I64: case MDL_GGUF_F64: return 8;
    default: return 0;
    }
}

const char *mdl_gguf_type_name(int type)
{
    static const char *const names[MDL_GGUF_TYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                           "bool", "string", "array", "u64", "i64", "f64"};
    return type >= 0 && type < MDL_GGUF_TYPE_COUNT ? names[type] : "invalid";
}

static int check_bools(rd *r, const uint8_t *p, uint64_t n, const char *key)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return rd_fail(r, MEMRA_E_FORMAT, "key '%s': bool value %u (allowed 0 or 1)", key, p[i]);
    return 0;
}

static int skip_value(rd *r, int type, int depth, const char *key);

/* The n elements of an array of element type et (the header is already read). str_off (n entries, may be
 * NULL) receives the map offset of each string's length prefix. */
static int skip_array_body(rd *r, uint32_t et, uint64_t n, int depth, const char *key, uint64_t *str_off)
{
    const uint8_t *p;
    int rc;
    const size_t es = mdl_gguf_scalar_size((int)et);
    if (es) {
        if (n > left(r) / es)
            return rd_fail(r, MEMRA_E_FORMAT, "key '%s': array of %llu %s runs past the end of the file", key,
                           (unsigned long long)n, mdl_gguf_type_name((int)et));
        rc = rd_take(r, n * es, key, &p);
        return rc ? rc : et == MDL_GGUF_BOOL ? check_bools(r, p, n, key) : 0;
    }
    if (et == MDL_GGUF_STRING) {
        if (n > left(r) / 8)
            return rd_fail(r, MEMRA_E_FORMAT, "key '%s': array of %llu strings runs past the end of the file",
                           key, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            if (str_off)
                str_off[i] = r->pos;
            if ((rc = rd_str(r, key, &p, &len)))
                return rc;
        }
        return 0;
    }
    if (et == MDL_GGUF_ARRAY) {
        if (n > left(r) / 12)
            return rd_fail(r, MEMRA_E_FORMAT, "key '%s': array of %llu arrays runs past the end of the file",
                           key, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if ((rc = skip_value(r, MDL_GGUF_ARRAY, depth + 1, key)))
                return rc;
        return 0;
    }
    return rd_fail(r, MEMRA_E_FORMAT, "key '%s': array element type %u is invalid (allowed 0..12)", key, et);
}

/* Validate one value of the given type and move past it. */
static int skip_value(rd *r, int type, int depth, const char *key)
{
    const uint8_t *p;
    uint64_t n;
    uint32_t et;
    int rc;
    if (mdl_gguf_scalar_size(type)) {
        rc = rd_take(r, mdl_gguf_scalar_size(type), key, &p);
        return rc ? rc : type == MDL_GGUF_BOOL ? check_bools(r, p, 1, key) : 0;
    }
    if (type == MDL_GGUF_STRING)
        return rd_str(r, key, &p, &n);
    if (type != MDL_GGUF_ARRAY)
        return rd_fail(r, MEMRA_E_FORMAT, "key '%s': value type %d is invalid (allowed 0..12)", key, type);
    if (depth >= MDL_GGUF_MAX_DEPTH)
        return rd_fail(r, MEMRA_E_FORMAT, "key '%s': arrays nested deeper than %d", key, MDL_GGUF_MAX_DEPTH);
    if ((rc = rd_u32(r, key, &et)) || (rc = rd_u64(r, key, &n)))
        return rc;
    return skip_array_body(r, et, n, depth, key, NULL);
}

static int read_kv(rd *r, mdl_gguf *g, int i)
{
    mdl_gguf_kv *kv = &g->kv[i];
    char what[48];
    uint32_t type;
    int rc;
    snprintf(what, sizeof what, "key %d", i);
    if ((rc = rd_name(r, what, &kv->key)) || (rc = rd_u32(r, kv->key, &type)))
        return rc;
    if (type >= MDL_GGUF_TYPE_COUNT)
        return rd_fail(r, MEMRA_E_FORMAT, "key '%s': value type %u is invalid (allowed 0..12)", kv->key, type);
    kv->type = (int)type;
    if (type != MDL_GGUF_ARRAY) {
        kv->val = r->b + r->pos;
        return skip_value(r, (int)type, 0, kv->key);
    }
    uint32_t et;
    if ((rc = rd_u32(r, kv->key, &et)) || (rc = rd_u64(r, kv->key, &kv->arr_n)))
        return rc;
    kv->arr_type = (int)et;
    kv->val = r->b + r->pos;
    if (et == MDL_GGUF_STRING && kv->arr_n <= left(r) / 8) {
        kv->str_off = malloc(sizeof(uint64_t) * (size_t)(kv->arr_n ? kv->arr_n : 1));
        if (!kv->str_off)
            return dev_err_set(r->err, MEMRA_E_NOMEM, "%s: out of memory indexing '%s'", r->path, kv->key);
    }
    if ((rc = skip_array_body(r, et, kv->arr_n, 0, kv->key, kv->str_off)))
        return rc;
    const size_t es = mdl_gguf_scalar_size((int)et);
    if (es > 1 && ((uintptr_t)kv->val % es) != 0 && kv->arr_n > 0) { /* give callers aligned numbers */
        kv->copy = malloc((size_t)kv->arr_n * es);
        if (!kv->copy)
            return dev_err_set(r->err, MEMRA_E_NOMEM, "%s: out of memory copying '%s'", r->path, kv->key);
        memcpy(kv->copy, kv->val, (size_t)kv->arr_n * es);
    }
    return 0;
}

/* GGML type names for a clear "unsupported" message (types memra does not implement). */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const names[] = {"f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0",
                                        "q8_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs",
                                        "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",
                                        "i8", "i16", "i32", "i64", "f64", "iq1_m", "bf16"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static int read_tensor(rd *r, mdl_gguf *g, int i)
{
    mdl_gguf_tensor *t = &g->tensors[i];
    char what[48], *name = NULL;
    uint32_t n_dims, type;
    int rc;
    snprintf(what, sizeof what, "tensor %d name", i);
    rc = rd_name(r, what, &name);
    t->name = name;
    if (rc || (rc = rd_u32(r, name, &n_dims)))
        return rc;
    if (n_dims < 1 || n_dims > MDL_GGUF_MAX_DIMS)
        return rd_fail(r, MEMRA_E_FORMAT, "tensor '%s': n_dims %u (allowed 1..4)", name, n_dims);
    t->n_dims = (int)n_dims;
    int64_t count = 1;
    for (int d = 0; d < MDL_GGUF_MAX_DIMS; d++) {
        uint64_t v = 1;
        if (d < (int)n_dims && (rc = rd_u64(r, name, &v)))
            return rc;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return rd_fail(r, MEMRA_E_FORMAT, "tensor '%s': dim %d is %llu (allowed 1..2^63-1)", name, d,
                           (unsigned long long)v);
        if ((int64_t)v > INT64_MAX / count)
            return rd_fail(r, MEMRA_E_FORMAT, "tensor '%s': element count overflows 64 bits", name);
        t->ne[d] = (int64_t)v;
        count *= (int64_t)v;
    }
    if ((rc = rd_u32(r, name, &type)) || (rc = rd_u64(r, name, &t->offset)))
        return rc;
    if (!krn_type_supported((int)type))
        return rd_fail(r, MEMRA_E_UNSUPPORTED,
                       "tensor '%s' has type %u (%s), which memra does not support (supported: f32 f16 bf16 "
                       "q4_0 q4_1 q8_0 q4_K q5_K q6_K)", name, type, ggml_type_name(type));
    t->type = (int)type;
    const int be = krn_type_block_elems(t->type);
    if (t->ne[0] % be != 0)
        return rd_fail(r, MEMRA_E_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block (%d)",
                       name, (long long)t->ne[0], krn_type_name(t->type), be);
    const size_t rb = krn_row_bytes(t->type, t->ne[0]);
    const uint64_t rows = (uint64_t)(count / t->ne[0]);
    if (rb == 0 || rows > SIZE_MAX / rb)
        return rd_fail(r, MEMRA_E_FORMAT, "tensor '%s': byte size overflows", name);
    t->bytes = rb * (size_t)rows;
    return 0;
}

static int cmp_ent(const void *a, const void *b)
{
    return strcmp(((const mdl_gguf_ent *)a)->s, ((const mdl_gguf_ent *)b)->s);
}

/* Sort n names into ents; a duplicate is an error naming it. */
static int sort_names(rd *r, mdl_gguf_ent *ents, int n, const char *what)
{
    qsort(ents, (size_t)n, sizeof *ents, cmp_ent);
    for (int i = 1; i < n; i++)
        if (strcmp(ents[i - 1].s, ents[i].s) == 0)
            return dev_err_set(r->err, MEMRA_E_FORMAT, "%s: duplicate %s '%s' (entries %d and %d)", r->path,
                               what, ents[i].s, ents[i - 1].i, ents[i].i);
    return 0;
}

static int read_header(rd *r, mdl_gguf *g)
{
    const uint8_t *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    int rc;
    if (r->size < 24)
        return rd_fail(r, MEMRA_E_FORMAT, "truncated: a GGUF header needs 24 bytes, the file has %zu", r->size);
    if ((rc = rd_take(r, 4, "magic", &magic)))
        return rc;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return rd_fail(r, MEMRA_E_FORMAT, "not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")",
                       magic[0], magic[1], magic[2], magic[3]);
    if ((rc = rd_u32(r, "version", &version)))
        return rc;
    if (version != 2 && version != 3) {
        if ((version & 0xFFFF) == 0 && (version >> 16) != 0)
            return rd_fail(r, MEMRA_E_FORMAT, "big-endian GGUF (version bytes %08x) is not supported", version);
        return rd_fail(r, MEMRA_E_FORMAT, "GGUF version %u is not supported (versions 2 and 3 are)", version);
    }
    g->version = (int)version;
    if ((rc = rd_u64(r, "tensor count", &n_tensors)) || (rc = rd_u64(r, "metadata count", &n_kv)))
        return rc;
    if (n_kv > left(r) / MIN_KV_BYTES || n_kv > INT_MAX)
        return rd_fail(r, MEMRA_E_FORMAT, "metadata count %llu is impossible in a %zu-byte file",
                       (unsigned long long)n_kv, r->size);
    if (n_tensors > (left(r) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES || n_tensors > INT_MAX)
        return rd_fail(r, MEMRA_E_FORMAT, "tensor count %llu is impossible in a %zu-byte file",
                       (unsigned long long)n_tensors, r->size);
    g->kv = calloc((size_t)n_kv + 1, sizeof *g->kv);
    g->kv_sorted = calloc((size_t)n_kv + 1, sizeof *g->kv_sorted);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    g->t_sorted = calloc((size_t)n_tensors + 1, sizeof *g->t_sorted);
    if (!g->kv || !g->kv_sorted || !g->tensors || !g->t_sorted)
        return dev_err_set(r->err, MEMRA_E_NOMEM, "%s: out of memory for %llu keys and %llu tensors", r->path,
                           (unsigned long long)n_kv, (unsigned long long)n_tensors);
    for (int i = 0; i < (int)n_kv; i++) {
        if ((rc = read_kv(r, g, i)))
            return rc;
        g->n_kv = i + 1;
        g->kv_sorted[i] = (mdl_gguf_ent){g->kv[i].key, i};
    }
    if ((rc = sort_names(r, g->kv_sorted, g->n_kv, "key")))
        return rc;
    g->alignment = MDL_GGUF_DEFAULT_ALIGNMENT;
    if (mdl_gguf_find(g, "general.alignment") >= 0) {
        uint32_t a;
        if ((rc = mdl_gguf_get_u32(g, "general.alignment", &a, r->err)))
            return rc;
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
            return dev_err_set(r->err, MEMRA_E_FORMAT, "%s: general.alignment %u is not a power of two in 1..2^30",
                               r->path, a);
        g->alignment = a;
    }
    for (int i = 0; i < (int)n_tensors; i++) {
        rc = read_tensor(r, g, i);
        g->n_tensors = i + 1; /* the name (if any) is freed by close */
        if (rc)
            return rc;
        g->t_sorted[i] = (mdl_gguf_ent){g->tensors[i].name, i};
    }
    return sort_names(r, g->t_sorted, g->n_tensors, "tensor name");
}

static int place_tensors(rd *r, mdl_gguf *g)
{
    const size_t a = g->alignment;
    g->data_off = (r->pos + a - 1) / a * a;
    if (g->data_off > r->size) {
        if (g->n_tensors > 0)
            return rd_fail(r, MEMRA_E_FORMAT, "truncated: the data section would start at byte %zu",
                           g->data_off);
        g->data_off = r->size;
    }
    const size_t avail = r->size - g->data_off;
    for (int i = 0; i < g->n_tensors; i++) {
        mdl_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a != 0)
            return dev_err_set(r->err, MEMRA_E_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the "
                               "alignment %zu", r->path, t->name, (unsigned long long)t->offset, a);
        if (t->offset > avail || t->bytes > avail - t->offset)
            return dev_err_set(r->err, MEMRA_E_FORMAT, "%s: tensor '%s': data [%llu, %llu) runs past the end of "
                               "the data section (%zu bytes)", r->path, t->name, (unsigned long long)t->offset,
                               (unsigned long long)t->offset + t->bytes, avail);
        const size_t need = t->type == KRN_F32 ? 4 : 2;
        if ((g->data_off + t->offset) % need != 0)
            return dev_err_set(r->err, MEMRA_E_UNSUPPORTED, "%s: tensor '%s': data at byte %llu is not %zu-byte "
                               "aligned (general.alignment %zu)", r->path, t->name,
                               (unsigned long long)(g->data_off + t->offset), need, a);
        t->data = g->map + g->data_off + t->offset;
    }
    return 0;
}

mdl_gguf *mdl_gguf_open(const char *path, dev_err *err)
{
    mdl_gguf *g = NULL;
    int fd = -1;
    if (!path)
        goto inval;
    g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        dev_err_set(err, MEMRA_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block: it is refused below */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        dev_err_set(err, MEMRA_E_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        dev_err_set(err, MEMRA_E_IO, "%s: not a regular file", path);
        goto fail;
    }
    g->size = (size_t)st.st_size;
    g->id = (mdl_gguf_id){.size = (uint64_t)st.st_size, .mtime_s = (int64_t)st.st_mtim.tv_sec,
                          .mtime_ns = (int64_t)st.st_mtim.tv_nsec};
    if (g->size > 0) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            dev_err_set(err, MEMRA_E_IO, "%s: cannot map %zu bytes: %s", path, g->size, strerror(errno));
            goto fail;
        }
        g->map = m;
    }
    close(fd);
    fd = -1;
    rd r = {g->path, g->map, g->size, 0, err};
    if (read_header(&r, g) || place_tensors(&r, g))
        goto fail;
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64 */
    for (size_t i = 0; i < g->data_off; i++)
        h = (h ^ g->map[i]) * 1099511628211ull;
    g->id.header_hash = h;
    return g;
inval:
    dev_err_set(err, MEMRA_E_INVAL, "mdl_gguf_open: path is NULL");
fail:
    if (fd >= 0)
        close(fd);
    mdl_gguf_close(g);
    return NULL;
}

void mdl_gguf_close(mdl_gguf *g)
{
    if (!g)
        return;
    for (int i = 0; g->kv && i < g->n_kv + 1; i++) { /* +1: the entry being read when open failed */
        free(g->kv[i].key);
        free(g->kv[i].str_off);
        free(g->kv[i].copy);
    }
    for (int i = 0; g->tensors && i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    if (g->map)
        munmap((void *)g->map, g->size);
    free(g->path);
    free(g);
}
