/* See api_tiny.h. */
#include "support/api_tiny.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support/gguf_tiny.h"

memra_model *api_tiny_model;
char api_tiny_path[256];

int api_tiny_setup(void **state)
{
    (void)state;
    dev_err err = {0};
    if (gguf_tiny_write_temp(api_tiny_path, sizeof api_tiny_path, NULL, &err) != 0) {
        fprintf(stderr, "tiny model: %s\n", err.msg);
        return -1;
    }
    if (!(api_tiny_model = memra_model_load(api_tiny_path, NULL)))
        fprintf(stderr, "tiny model: %s\n", memra_last_error());
    return api_tiny_model ? 0 : -1;
}

int api_tiny_teardown(void **state)
{
    (void)state;
    memra_model_free(api_tiny_model);
    api_tiny_model = NULL;
    unlink(api_tiny_path);
    return 0;
}

memra_runtime_params api_tiny_params(int stages)
{
    memra_runtime_params p = memra_runtime_default_params();
    p.backend = MEMRA_BACKEND_CPU;
    p.cpu_devices = 4;
    p.apply_env = 0;
    p.stages = stages;
    if (stages > 1) {
        p.n_devices = stages;
        for (int s = 0; s < stages; s++)
            p.devices[s] = s;
    }
    p.n_ctx = 64;
    return p;
}

void api_tiny_prompt(memra_token *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = (memra_token)((i * 37 + salt * 11 + 5) % API_TINY_NV);
}

void api_tiny_assert_error(const char *msg, int code, const char *what)
{
    if (!strstr(msg, what) || !strstr(msg, memra_status_str(code)))
        fail_msg("error message '%s' should name '%s' and %s", msg, what, memra_status_str(code));
}
