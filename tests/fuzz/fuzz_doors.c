/* libFuzzer target: the door parsers (docs/doors.md) fed arbitrary values. Input: lines; a line's first byte
 * picks a door (its value modulo the table below), the rest of the line up to a NUL is the value. Every picked
 * door is set ('H' = 72 picks door 0, MEMRA_PP_STAGES; 'I' the next, ...: the seeds read "H4" as
 * MEMRA_PP_STAGES=4), then every reader runs: act_doors_read_structural (+ act_pp_config_check and act_pp_cuts over
 * 30 layers when it accepts), act_doors_read_seams, dev_backend_doors, mdl_kv_type_from_env,
 * mdl_act_type_from_env, mdl_x8_door; then the doors are unset. Checked: no crash or sanitizer report, and every
 * refusal carries a message. Seeds: tests/fuzz/doors/. Run by scripts/fuzz. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/doors.h"
#include "device/dev.h"
#include "model/llama.h"
#include "model/repack.h"

static const char *const k_doors[] = {
    "MEMRA_PP_STAGES", "MEMRA_PP_SPLIT", "MEMRA_PP_SPLITS", "MEMRA_PP_DEVICES", "MEMRA_PP_SHARD",
    "MEMRA_PP_SLOTS", "MEMRA_PP_STREAMS", "MEMRA_PP_OVERLAP", "MEMRA_BATCH_PP", "MEMRA_PP_ALLOW_UNSPLIT_BATCH",
    "MEMRA_SPEC_PP", "MEMRA_PRIME_PP", "MEMRA_PRIME_PIPE", "MEMRA_PDL", "MEMRA_PP_GRAPH",
    "MEMRA_PP_SAME_DEVICE_PIPE", "MEMRA_PP_MARKERS", "MEMRA_PP_KEYS", "MEMRA_PP_HEAD_RING", "MEMRA_BACKEND",
    "MEMRA_CPU_DEVICES", "MEMRA_KV_TYPE", "MEMRA_ACT_TYPE", "MEMRA_CUDA_X8",
};
#define N_DOORS (sizeof k_doors / sizeof k_doors[0])

static void need_msg(int rc, const dev_err *err)
{
    if (rc < 0 && err->msg[0] == '\0')
        __builtin_trap();
}

static char env[N_DOORS][512]; /* "NAME=value" strings the environment points to while set (long values cut) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size + 1);
    if (!in)
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    for (char *line = in, *next; line < in + size; line = next) {
        char *nl = memchr(line, '\n', (size_t)(in + size - line));
        next = nl ? nl + 1 : in + size;
        if (nl)
            *nl = '\0';
        if (*line) { /* putenv over a buffer of our own: setenv would keep every value ever set (glibc) */
            const size_t d = (unsigned char)line[0] % N_DOORS;
            snprintf(env[d], sizeof env[d], "%s=%s", k_doors[d], line + 1);
            putenv(env[d]);
        }
    }
    dev_err err = {0};
    act_pp_config cfg = act_pp_config_default();
    int rc = act_doors_read_structural(&cfg, &err);
    need_msg(rc, &err);
    if (rc == 0) {
        err = (dev_err){0};
        rc = act_pp_config_check(&cfg, &err);
        need_msg(rc, &err);
        int fence[ACT_PP_MAX_STAGES + 1];
        double cost[31];
        for (int i = 0; i < 31; i++)
            cost[i] = 1.0 + (i % 3); /* MEMRA_PP_SPLITS=weights reads them */
        if (rc == 0) {
            err = (dev_err){0};
            need_msg(act_pp_cuts(&cfg, 30, 8, cost, fence, &err), &err);
        }
    }
    act_pp_seams seams = act_pp_seams_default();
    err = (dev_err){0};
    need_msg(act_doors_read_seams(&seams, &err), &err);
    int kind = -1, n_cpu = 8, t, on;
    err = (dev_err){0};
    need_msg(dev_backend_doors(&kind, &n_cpu, &err), &err);
    err = (dev_err){0};
    need_msg(mdl_kv_type_from_env(&t, &err), &err);
    err = (dev_err){0};
    need_msg(mdl_act_type_from_env(&t, &err), &err);
    err = (dev_err){0};
    need_msg(mdl_x8_door(&on, &err), &err);
    for (size_t i = 0; i < N_DOORS; i++)
        unsetenv(k_doors[i]);
    free(in);
    return 0;
}
