/* Test-only GGUF tokenizer-key reader (see tok_gguf_vocab.h). Walks the key/value section once,
 * skipping every value it does not need; stops before the tensor infos. */
#include "support/tok_gguf_vocab.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 };

typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint64_t rd_u(rd *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static const char *rd_str(rd *r, size_t *len)
{
    uint64_t n = rd_u(r, 8);
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        *len = 0;
        return "";
    }
    const char *s = (const char *)r->p;
    r->p += n;
    *len = (size_t)n;
    return s;
}

static size_t scalar_size(uint32_t t)
{
    switch (t) {
    case T_U8: case T_I8: case T_BOOL: return 1;
    case T_U16: case T_I16: return 2;
    case T_U32: case T_I32: case T_F32: return 4;
    case T_U64: case T_I64: case T_F64: return 8;
    default: return 0;
    }
}

static void skip_value(rd *r, uint32_t t)
{
    size_t len;
    if (t == T_STR) {
        rd_str(r, &len);
    } else if (t == T_ARR) {
        uint32_t et = (uint32_t)rd_u(r, 4);
        uint64_t n = rd_u(r, 8);
        for (uint64_t i = 0; i < n && !r->bad; i++)
            skip_value(r, et);
    } else if (scalar_size(t)) {
        rd_u(r, scalar_size(t));
    } else {
        r->bad = 1;
    }
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Read a string array into (ptrs, lens) arrays allocated here. */
static int read_str_arr(rd *r, uint32_t *count, const char ***ptrs, size_t **lens)
{
    uint32_t et = (uint32_t)rd_u(r, 4);
    uint64_t n = rd_u(r, 8);
    if (r->bad || et != T_STR || n > (uint64_t)(r->end - r->p) / 8)
        return MEMRA_E_FORMAT;
    *ptrs = malloc((size_t)n * sizeof **ptrs + 1);
    *lens = malloc((size_t)n * sizeof **lens + 1);
    if (!*ptrs || !*lens)
        return MEMRA_E_NOMEM;
    for (uint64_t i = 0; i < n; i++)
        (*ptrs)[i] = rd_str(r, &(*lens)[i]);
    *count = (uint32_t)n;
    return r->bad ? MEMRA_E_FORMAT : 0;
}

static int32_t read_int(rd *r, uint32_t t)
{
    size_t n = scalar_size(t);
    if (!n || t == T_F32 || t == T_F64) {
        skip_value(r, t);
        return -1;
    }
    return (int32_t)rd_u(r, n);
}

int tok_gguf_vocab_load(const char *path, tok_gguf_vocab *v, dev_err *err)
{
    memset(v, 0, sizeof *v);
    mdl_vocab_src_init(&v->src);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return dev_err_set(err, MEMRA_E_IO, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 24) {
        close(fd);
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: not a GGUF (too small)", path);
    }
    v->map_len = (size_t)st.st_size;
    v->map = mmap(NULL, v->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (v->map == MAP_FAILED) {
        v->map = NULL;
        return dev_err_set(err, MEMRA_E_IO, "%s: mmap failed", path);
    }
    rd r = {v->map, (const uint8_t *)v->map + v->map_len, 0};
    if (rd_u(&r, 4) != 0x46554747u) /* "GGUF" */
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: bad magic", path);
    uint32_t ver = (uint32_t)rd_u(&r, 4);
    if (ver < 2)
        return dev_err_set(err, MEMRA_E_FORMAT, "%s: GGUF v%u unsupported", path, ver);
    rd_u(&r, 8);
    uint64_t n_kv = rd_u(&r, 8);
    int no = 0, rc = 0;
    for (uint64_t k = 0; k < n_kv && !r.bad && rc == 0; k++) {
        size_t kl;
        const char *key = rd_str(&r, &kl);
        uint32_t t = (uint32_t)rd_u(&r, 4);
#define IS(s) (kl == sizeof(s) - 1 && memcmp(key, s, kl) == 0)
        if (IS("tokenizer.ggml.tokens")) {
            rc = read_str_arr(&r, &v->src.n_tokens, (const char ***)&v->src.tokens, (size_t **)&v->src.token_lens);
            v->owned[no++] = (void *)v->src.tokens;
            v->owned[no++] = (void *)v->src.token_lens;
        } else if (IS("tokenizer.ggml.merges")) {
            rc = read_str_arr(&r, &v->src.n_merges, (const char ***)&v->src.merges, (size_t **)&v->src.merge_lens);
            v->owned[no++] = (void *)v->src.merges;
            v->owned[no++] = (void *)v->src.merge_lens;
        } else if ((IS("tokenizer.ggml.token_type") || IS("tokenizer.ggml.scores")) && t == T_ARR) {
            uint32_t et = (uint32_t)rd_u(&r, 4);
            uint64_t n = rd_u(&r, 8);
            if (r.bad || scalar_size(et) != 4 || n > (uint64_t)(r.end - r.p) / 4) {
                rc = MEMRA_E_FORMAT;
                break;
            }
            void *a = malloc((size_t)n * 4 + 4);
            if (!a) {
                rc = MEMRA_E_NOMEM;
                break;
            }
            memcpy(a, r.p, (size_t)n * 4);
            r.p += n * 4;
            v->owned[no++] = a;
            if (IS("tokenizer.ggml.scores"))
                v->src.scores = a;
            else
                v->src.token_types = a;
        } else if ((IS("tokenizer.ggml.model") || IS("tokenizer.ggml.pre") || IS("tokenizer.chat_template")) &&
                   t == T_STR) {
            size_t sl;
            const char *s = rd_str(&r, &sl);
            char *d = dup_n(s, sl);
            if (!d) {
                rc = MEMRA_E_NOMEM;
                break;
            }
            v->owned[no++] = d;
            if (IS("tokenizer.ggml.model"))
                v->src.model = d;
            else if (IS("tokenizer.ggml.pre"))
                v->src.pre = d;
            else
                v->src.chat_template = d;
        } else if (IS("tokenizer.ggml.bos_token_id")) {
            v->src.bos = read_int(&r, t);
        } else if (IS("tokenizer.ggml.eos_token_id")) {
            v->src.eos = read_int(&r, t);
        } else if (IS("tokenizer.ggml.unknown_token_id")) {
            v->src.unk = read_int(&r, t);
        } else if (IS("tokenizer.ggml.padding_token_id")) {
            v->src.pad = read_int(&r, t);
        } else if (IS("tokenizer.ggml.add_bos_token")) {
            v->src.add_bos = read_int(&r, t);
        } else if (IS("tokenizer.ggml.add_eos_token")) {
            v->src.add_eos = read_int(&r, t);
        } else if (IS("tokenizer.ggml.add_space_prefix")) {
            v->src.add_space_prefix = read_int(&r, t);
        } else {
            skip_value(&r, t);
        }
#undef IS
    }
    if (rc == 0 && r.bad)
        rc = MEMRA_E_FORMAT;
    if (rc)
        return dev_err_set(err, rc, "%s: tokenizer keys unreadable", path);
    return 0;
}

void tok_gguf_vocab_free(tok_gguf_vocab *v)
{
    for (size_t i = 0; i < sizeof v->owned / sizeof v->owned[0]; i++)
        free(v->owned[i]);
    if (v->map)
        munmap(v->map, v->map_len);
    memset(v, 0, sizeof *v);
}
