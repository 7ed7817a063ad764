/* See api_tiny.h. */
#include "support/api_tiny.h"

#include <stdio.h>
#include <unistd.h>

#include "support/gguf_tiny.h"

memra_model *api_tiny_open(char *path, size_t cap)
{
    dev_err err = {0};
    if (gguf_tiny_write_temp(path, cap, NULL, &err) != 0) {
        fprintf(stderr, "tiny model: %s\n", err.msg);
        return NULL;
    }
    memra_model *m = memra_model_load(path, NULL);
    if (!m)
        fprintf(stderr, "tiny model: %s\n", memra_last_error());
    return m;
}

void api_tiny_close(memra_model *m, const char *path)
{
    memra_model_free(m);
    unlink(path);
}
