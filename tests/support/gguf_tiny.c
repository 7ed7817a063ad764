/* Test helper: tiny synthetic GGUF models (see gguf_tiny.h). No shared mutable state. */
#include "support/gguf_tiny.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gguf_tiny_defaults(gguf_tiny_params *p) { mdl_gguf_synth_defaults(p); }

int gguf_tiny_write(const char *path, const gguf_tiny_params *p, dev_err *err)
{
    gguf_tiny_params d;
    if (!p) {
        gguf_tiny_defaults(&d);
        p = &d;
    }
    return mdl_gguf_synth_write(path, p, err);
}

int gguf_tiny_temp_path(char *path, size_t cap, const char *tag, dev_err *err)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    const int n = snprintf(path, cap, "%s/memra-%s-XXXXXX", dir, tag ? tag : "gguf");
    if (n < 0 || (size_t)n >= cap)
        return dev_err_set(err, MEMRA_E_INVAL, "temp path: buffer of %zu bytes too small", cap);
    const int fd = mkstemp(path);
    if (fd < 0)
        return dev_err_set(err, MEMRA_E_IO, "%s: mkstemp failed: %s", path, strerror(errno));
    close(fd);
    return 0;
}

int gguf_tiny_write_temp(char *path, size_t cap, const gguf_tiny_params *p, dev_err *err)
{
    int rc = gguf_tiny_temp_path(path, cap, "tiny", err);
    if (rc)
        return rc;
    rc = gguf_tiny_write(path, p, err);
    if (rc)
        unlink(path);
    return rc;
}
