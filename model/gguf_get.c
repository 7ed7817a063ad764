/* GGUF reader: lookups and typed getters over an opened (immutable) file. No shared mutable state. */
#include "model/gguf_impl.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int mdl_gguf_version(const mdl_gguf *g) { return g->version; }
const char *mdl_gguf_path(const mdl_gguf *g) { return g->path; }
size_t mdl_gguf_file_size(const mdl_gguf *g) { return g->size; }
uint32_t mdl_gguf_alignment(const mdl_gguf *g) { return g->alignment; }
size_t mdl_gguf_data_offset(const mdl_gguf *g) { return g->data_off; }
const mdl_gguf_id *mdl_gguf_identity(const mdl_gguf *g) { return &g->id; }

int mdl_gguf_id_check_path(const char *path, const mdl_gguf_id *want, const char *since, dev_err *err)
{
    struct stat st;
    if (!path || !want)
        return dev_err_set(err, MEMRA_E_INVAL, "mdl_gguf_id_check_path: path and want are required");
    if (stat(path, &st) != 0)
        return dev_err_set(err, MEMRA_E_IO, "%s: cannot stat the model file loaded by %s: %s", path, since,
                           strerror(errno));
    const mdl_gguf_id got = {.size = (uint64_t)st.st_size, .mtime_s = (int64_t)st.st_mtim.tv_sec,
                             .mtime_ns = (int64_t)st.st_mtim.tv_nsec, .header_hash = want->header_hash};
    return mdl_gguf_id_compare(path, &got, want, since, err);
}

int mdl_gguf_id_compare(const char *path, const mdl_gguf_id *got, const mdl_gguf_id *want, const char *since,
                        dev_err *err)
{
    if (got->size != want->size)
        return dev_err_set(err, MEMRA_E_STATE, "%s changed since %s: %llu bytes, then %llu (load the model again)",
                           path, since, (unsigned long long)want->size, (unsigned long long)got->size);
    if (got->mtime_s != want->mtime_s || got->mtime_ns != want->mtime_ns)
        return dev_err_set(err, MEMRA_E_STATE, "%s changed since %s: modified at %lld.%09lld, then at %lld.%09lld "
                           "(load the model again)", path, since, (long long)want->mtime_s, (long long)want->mtime_ns,
                           (long long)got->mtime_s, (long long)got->mtime_ns);
    if (got->header_hash != want->header_hash)
        return dev_err_set(err, MEMRA_E_STATE, "%s changed since %s: its header (metadata, vocab, tensor table) "
                           "differs, same size and mtime (load the model again)", path, since);
    return 0;
}
int mdl_gguf_kv_count(const mdl_gguf *g) { return g->n_kv; }
int mdl_gguf_tensor_count(const mdl_gguf *g) { return g->n_tensors; }

const char *mdl_gguf_kv_key(const mdl_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL; }
int mdl_gguf_kv_type(const mdl_gguf *g, int i) { return i >= 0 && i < g->n_kv ? g->kv[i].type : -1; }

static int find_ent(const mdl_gguf_ent *ents, int n, const char *s)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        const int c = strcmp(ents[mid].s, s);
        if (c == 0)
            return ents[mid].i;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

int mdl_gguf_find(const mdl_gguf *g, const char *key)
{
    return key ? find_ent(g->kv_sorted, g->n_kv, key) : -1;
}

const mdl_gguf_tensor *mdl_gguf_tensor_at(const mdl_gguf *g, int i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const mdl_gguf_tensor *mdl_gguf_tensor_find(const mdl_gguf *g, const char *name)
{
    const int i = name ? find_ent(g->t_sorted, g->n_tensors, name) : -1;
    return i >= 0 ? &g->tensors[i] : NULL;
}

static const mdl_gguf_kv *get_kv(const mdl_gguf *g, const char *key, dev_err *err)
{
    const int i = mdl_gguf_find(g, key);
    if (i < 0) {
        dev_err_set(err, MEMRA_E_FORMAT, "%s: missing key '%s'", g->path, key ? key : "(null)");
        return NULL;
    }
    return &g->kv[i];
}

static int wrong_type(const mdl_gguf *g, const mdl_gguf_kv *kv, const char *want, dev_err *err)
{
    return dev_err_set(err, MEMRA_E_FORMAT, "%s: key '%s' has type %s, expected %s", g->path, kv->key,
                       mdl_gguf_type_name(kv->type), want);
}

/* An integer value as (negative?, magnitude-or-value): *neg = 1 and *s < 0 for negative values. */
static int read_int(const mdl_gguf_kv *kv, int *neg, uint64_t *u, int64_t *s)
{
    uint8_t b[8];
    const size_t n = mdl_gguf_scalar_size(kv->type);
    if (n == 0 || kv->type == MDL_GGUF_F32 || kv->type == MDL_GGUF_F64 || kv->type == MDL_GGUF_BOOL)
        return -1;
    memcpy(b, kv->val, n);
    switch (kv->type) {
    case MDL_GGUF_U8: *u = b[0]; break;
    case MDL_GGUF_I8: *s = (int8_t)b[0]; break;
    case MDL_GGUF_U16: { uint16_t v; memcpy(&v, b, 2); *u = v; break; }
    case MDL_GGUF_I16: { int16_t v; memcpy(&v, b, 2); *s = v; break; }
    case MDL_GGUF_U32: { uint32_t v; memcpy(&v, b, 4); *u = v; break; }
    case MDL_GGUF_I32: { int32_t v; memcpy(&v, b, 4); *s = v; break; }
    case MDL_GGUF_U64: memcpy(u, b, 8); break;
    case MDL_GGUF_I64: memcpy(s, b, 8); break;
    default: return -1;
    }
    const int is_signed = kv->type == MDL_GGUF_I8 || kv->type == MDL_GGUF_I16 || kv->type == MDL_GGUF_I32 ||
                          kv->type == MDL_GGUF_I64;
    if (is_signed) {
        *neg = *s < 0;
        *u = *neg ? 0 : (uint64_t)*s;
    } else {
        *neg = 0;
        *s = *u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)*u;
    }
    return 0;
}

/* The integer value of key (any integer type), as read_int gives it; MEMRA_E_FORMAT + err when the key is
 * missing or not an integer. */
static int get_int(const mdl_gguf *g, const char *key, int *neg, uint64_t *u, int64_t *s, dev_err *err)
{
    const mdl_gguf_kv *kv = get_kv(g, key, err);
    if (!kv)
        return MEMRA_E_FORMAT;
    return read_int(kv, neg, u, s) != 0 ? wrong_type(g, kv, "an integer", err) : 0;
}

int mdl_gguf_get_u32(const mdl_gguf *g, const char *key, uint32_t *out, dev_err *err)
{
    int neg = 0, rc;
    uint64_t u = 0;
    int64_t s = 0;
    if ((rc = get_int(g, key, &neg, &u, &s, err)) != 0)
        return rc;
    if (neg || u > UINT32_MAX)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: key '%s' = %s%llu does not fit in u32", g->path, key,
                           neg ? "-" : "", neg ? (unsigned long long)(-(s + 1)) + 1ull : (unsigned long long)u);
    *out = (uint32_t)u;
    return 0;
}

int mdl_gguf_get_i64(const mdl_gguf *g, const char *key, int64_t *out, dev_err *err)
{
    int neg = 0, rc;
    uint64_t u = 0;
    int64_t s = 0;
    if ((rc = get_int(g, key, &neg, &u, &s, err)) != 0)
        return rc;
    if (!neg && u > (uint64_t)INT64_MAX)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: key '%s' = %llu does not fit in i64", g->path, key,
                           (unsigned long long)u);
    *out = s;
    return 0;
}

int mdl_gguf_get_f32(const mdl_gguf *g, const char *key, float *out, dev_err *err)
{
    const mdl_gguf_kv *kv = get_kv(g, key, err);
    if (!kv)
        return MEMRA_E_FORMAT;
    if (kv->type == MDL_GGUF_F32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == MDL_GGUF_F64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return wrong_type(g, kv, "f32 or f64", err);
    }
    return 0;
}

int mdl_gguf_get_bool(const mdl_gguf *g, const char *key, int *out, dev_err *err)
{
    const mdl_gguf_kv *kv = get_kv(g, key, err);
    if (!kv)
        return MEMRA_E_FORMAT;
    if (kv->type != MDL_GGUF_BOOL)
        return wrong_type(g, kv, "bool", err);
    *out = kv->val[0] != 0;
    return 0;
}

int mdl_gguf_get_str(const mdl_gguf *g, const char *key, const char **s, size_t *len, dev_err *err)
{
    const mdl_gguf_kv *kv = get_kv(g, key, err);
    if (!kv)
        return MEMRA_E_FORMAT;
    if (kv->type != MDL_GGUF_STRING)
        return wrong_type(g, kv, "string", err);
    uint64_t n;
    memcpy(&n, kv->val, 8);
    *s = (const char *)kv->val + 8;
    *len = (size_t)n;
    return 0;
}

int mdl_gguf_get_arr(const mdl_gguf *g, const char *key, int *elem_type, uint64_t *n, dev_err *err)
{
    const mdl_gguf_kv *kv = get_kv(g, key, err);
    if (!kv)
        return MEMRA_E_FORMAT;
    if (kv->type != MDL_GGUF_ARRAY)
        return wrong_type(g, kv, "array", err);
    *elem_type = kv->arr_type;
    *n = kv->arr_n;
    return 0;
}

int mdl_gguf_arr_str(const mdl_gguf *g, const char *key, uint64_t i, const char **s, size_t *len)
{
    const int k = mdl_gguf_find(g, key);
    if (k < 0)
        return MEMRA_E_INVAL;
    const mdl_gguf_kv *kv = &g->kv[k];
    if (kv->type != MDL_GGUF_ARRAY || kv->arr_type != MDL_GGUF_STRING || i >= kv->arr_n || !kv->str_off)
        return MEMRA_E_INVAL;
    uint64_t n;
    memcpy(&n, g->map + kv->str_off[i], 8);
    *s = (const char *)g->map + kv->str_off[i] + 8;
    *len = (size_t)n;
    return 0;
}

const void *mdl_gguf_arr_data(const mdl_gguf *g, const char *key)
{
    const int k = mdl_gguf_find(g, key);
    if (k < 0)
        return NULL;
    const mdl_gguf_kv *kv = &g->kv[k];
    if (kv->type != MDL_GGUF_ARRAY || mdl_gguf_scalar_size(kv->arr_type) == 0)
        return NULL;
    return kv->copy ? kv->copy : kv->val;
}
