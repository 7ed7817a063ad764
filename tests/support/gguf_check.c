/* Test helper: byte-level GGUF checks (see gguf_check.h). No shared mutable state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/gguf_check.h"

void gguf_check_save(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void gguf_check_open_fails(const char *path, const void *buf, size_t n, int code, const char *want)
{
    dev_err err = {0};
    gguf_check_save(path, buf, n);
    mdl_gguf *g = mdl_gguf_open(path, &err);
    if (g) {
        mdl_gguf_close(g);
        fail_msg("opened a file that should fail with '%s'", want);
    }
    if (err.code != code || !strstr(err.msg, want) || !strstr(err.msg, path))
        fail_msg("got %s '%s', want %s with '%s' and the path", memra_status_str(err.code), err.msg,
                 memra_status_str(code), want);
}

mdl_gguf *gguf_check_open_buf(const char *path, const void *buf, size_t n)
{
    dev_err err = {0};
    gguf_check_save(path, buf, n);
    mdl_gguf *g = mdl_gguf_open(path, &err);
    if (!g)
        fail_msg("open: %s", err.msg);
    return g;
}

void gguf_check_finish(mdl_gguf_writer *w, void **buf, size_t *n)
{
    dev_err err = {0};
    if (mdl_gguf_writer_to_mem(w, buf, n, &err))
        fail_msg("writer: %s", err.msg);
    mdl_gguf_writer_destroy(w);
}

size_t gguf_check_tensor_info_at(const uint8_t *buf, size_t n, const char *name)
{
    const size_t len = strlen(name);
    for (size_t i = 8; i + len <= n; i++) {
        uint64_t l;
        memcpy(&l, buf + i - 8, 8);
        if (l == len && memcmp(buf + i, name, len) == 0)
            return i + len;
    }
    fail_msg("tensor info '%s' not found", name);
    return 0;
}

void gguf_check_put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
void gguf_check_put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
