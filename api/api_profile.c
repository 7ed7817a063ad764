/* memra-tune's profile, applied by memra_runtime_create: see api_profile.h. No shared state. The file is parsed
 * with cJSON (optional at build time: without it a set profile is refused). */
#include "api/api_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "actors/doors.h"
#include "api/api_internal.h"
#include "kernels/quant.h"
#include "model/gguf_synth.h"

#ifdef MEMRA_HAVE_CJSON
#include <cjson/cJSON.h>

#define PROFILE_MAX_BYTES (16u << 20)

/* The file's bytes, NUL-terminated (malloc'd), or NULL with err. */
static char *slurp(const char *path, const char *from, dev_err *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        dev_err_set(err, MEMRA_E_IO, "%s=%s: cannot read the profile", from, path);
        goto fail;
    }
    if ((unsigned long)n > PROFILE_MAX_BYTES) {
        dev_err_set(err, MEMRA_E_INVAL, "%s=%s: %ld bytes, a profile has at most %u", from, path, n,
                    PROFILE_MAX_BYTES);
        goto fail;
    }
    if (!(buf = malloc((size_t)n + 1))) {
        dev_err_set(err, MEMRA_E_NOMEM, "%s=%s: out of host memory", from, path);
        goto fail;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        dev_err_set(err, MEMRA_E_IO, "%s=%s: cannot read the profile", from, path);
        free(buf);
        buf = NULL;
        goto fail;
    }
    buf[n] = 0;
fail:
    if (f)
        fclose(f);
    return buf;
}

/* Integer member key of obj (a whole number in [lo, hi]) into *out; else MEMRA_E_INVAL naming it. */
static int get_int(const cJSON *obj, const char *key, long lo, long hi, const char *from, const char *path, long *out,
                   dev_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long)v->valuedouble || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"%s\" must be an integer in %ld..%ld", from, path, key, lo,
                           hi);
    *out = (long)v->valuedouble;
    return 0;
}

/* An array member key of obj of n integers in [lo, hi] into out[]. */
static int get_ints(const cJSON *obj, const char *key, int n, long lo, long hi, const char *from, const char *path,
                    int *out, dev_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key), *e;
    int i = 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"%s\" must be an array of %d integers", from, path, key, n);
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(long)e->valuedouble || e->valuedouble < (double)lo ||
            e->valuedouble > (double)hi)
            return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"%s\" entry %d must be an integer in %ld..%ld", from,
                               path, key, i, lo, hi);
        out[i++] = (int)e->valuedouble;
    }
    return 0;
}

/* The stage count and devices the runtime asks for without the profile: its doors (with apply_env), else its
 * fields; 0 / n_dev 0 when it leaves them open. */
static int asked_placement(const memra_runtime_params *p, int *stages, int *n_dev, int *dev, const char **src,
                           dev_err *err)
{
    act_pp_config c = act_pp_config_default();
    c.stages = p->stages, c.n_devices = p->n_devices;
    memcpy(c.devices, p->devices, sizeof c.devices);
    *src = "memra_runtime_params";
    if (p->apply_env && (getenv("MEMRA_PP_STAGES") || getenv("MEMRA_PP_SPLIT") || getenv("MEMRA_PP_DEVICES"))) {
        c.n_cuts = 0, c.balance = 0; /* the doors' own check of cuts needs none of the profile's */
        int r = act_doors_read_structural(&c, err);
        if (r < 0)
            return r;
        *src = "the doors (MEMRA_PP_STAGES / MEMRA_PP_DEVICES)";
    }
    *stages = c.stages > 1 ? c.stages : 0;
    *n_dev = c.n_devices;
    memcpy(dev, c.devices, sizeof c.devices);
    return 0;
}

static int apply(const memra_model *model, memra_runtime_params *p, const char *from, const char *path, dev_err *err)
{
    char *text = slurp(path, from, err);
    cJSON *root = NULL;
    int rc = 0;
    if (!text)
        return err->code;
    if (!(root = cJSON_Parse(text))) {
        const char *at = cJSON_GetErrorPtr();
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s: not JSON (cJSON stops at byte %ld)", from, path,
                         at ? (long)(at - text) : -1L);
        goto fail;
    }
    long ver, v;
    if ((rc = get_int(root, "memra_tune_profile", 1, 1, from, path, &ver, err)))
        goto fail;
    /* the model: file size and shape */
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(mj, "arch");
    if (!cJSON_IsObject(mj) || !cJSON_IsString(arch)) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"model\" must be an object with a string \"arch\"", from,
                         path);
        goto fail;
    }
    struct stat st;
    const long long size = model->synth || stat(model->path, &st) != 0 ? 0 : (long long)st.st_size;
    const struct { const char *key; long have; } shape[] = {{"n_layer", model->n_layer}, {"n_embd", model->n_embd},
                                                           {"n_vocab", model->n_vocab}};
    if (strcmp(arch->valuestring, model->arch)) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: arch %s in the profile, %s in %s", from,
                         path, arch->valuestring, model->arch, model->path);
        goto fail;
    }
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        if ((rc = get_int(mj, shape[i].key, 0, 1L << 30, from, path, &v, err)))
            goto fail;
        if (v != shape[i].have) {
            rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: %s %ld in the profile, %ld in %s",
                             from, path, shape[i].key, v, shape[i].have, model->path);
            goto fail;
        }
    }
    /* a synthetic shape (api_model_synthetic) has no file: its name, weight type and head / ff shape name it */
    const cJSON *sy = cJSON_GetObjectItemCaseSensitive(mj, "synthetic");
    if (!sy != !model->synth) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: %s in the profile, %s %s", from, path,
                         sy ? "a synthetic shape" : "a GGUF file", model->synth ? "the synthetic shape" : "the file",
                         model->path);
        goto fail;
    }
    if (sy) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(sy, "name");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sy, "type");
        const char *have_ty = krn_type_name(model->synth->type);
        if (!cJSON_IsString(nm) || !cJSON_IsString(ty)) {
            rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"synthetic\" must be an object with strings \"name\" and "
                             "\"type\"", from, path);
            goto fail;
        }
        if (strcmp(nm->valuestring, model->path) || strcmp(ty->valuestring, have_ty)) {
            rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: synthetic %s %s in the profile, "
                             "%s %s asked", from, path, nm->valuestring, ty->valuestring, model->path, have_ty);
            goto fail;
        }
        const struct { const char *key; long have; } syn[] = {{"n_head", model->synth->n_head},
                                                              {"n_head_kv", model->synth->n_head_kv},
                                                              {"n_ff", model->synth->n_ff}};
        for (size_t i = 0; i < sizeof syn / sizeof syn[0]; i++) {
            if ((rc = get_int(sy, syn[i].key, 0, 1L << 30, from, path, &v, err)))
                goto fail;
            if (v != syn[i].have) {
                rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: synthetic %s %ld in the "
                                 "profile, %ld in %s", from, path, syn[i].key, v, syn[i].have, model->path);
                goto fail;
            }
        }
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(mj, "file_size");
    if (!cJSON_IsNumber(fs) || (long long)fs->valuedouble != size) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another model: file_size %.0f in the profile, %lld "
                         "bytes in %s", from, path, cJSON_IsNumber(fs) ? fs->valuedouble : -1.0, size, model->path);
        goto fail;
    }
    /* the backend, stage count and device set */
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(root, "backend");
    if (!cJSON_IsString(be) || (strcmp(be->valuestring, "cpu") && strcmp(be->valuestring, "cuda"))) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"backend\" must be \"cpu\" or \"cuda\"", from, path);
        goto fail;
    }
    const int want_cuda = !strcmp(be->valuestring, "cuda");
    if ((p->backend == MEMRA_BACKEND_CPU && want_cuda) || (p->backend == MEMRA_BACKEND_CUDA && !want_cuda)) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another device set: backend %s in the profile, %s "
                         "asked", from, path, be->valuestring, want_cuda ? "cpu" : "cuda");
        goto fail;
    }
    long N;
    int cuts[MEMRA_MAX_STAGES], dev[MEMRA_MAX_STAGES], asked_dev[MEMRA_MAX_STAGES], asked_n, asked_nd;
    const char *src;
    if ((rc = get_int(root, "stages", 2, model->n_layer < MEMRA_MAX_STAGES ? model->n_layer : MEMRA_MAX_STAGES, from,
                      path, &N, err)) ||
        (rc = get_ints(root, "devices", (int)N, 0, 63, from, path, dev, err)) ||
        (rc = asked_placement(p, &asked_n, &asked_nd, asked_dev, &src, err)))
        goto fail;
    if (asked_n && asked_n != N) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another stage count: %ld stages in the profile, %d "
                         "asked by %s", from, path, N, asked_n, src);
        goto fail;
    }
    if (asked_nd && (asked_nd != N || memcmp(asked_dev, dev, (size_t)N * sizeof *dev))) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s was made for another device set: devices %d..%d (%ld stages) in "
                         "the profile differ from those asked by %s", from, path, dev[0], dev[N - 1], N, src);
        goto fail;
    }
    /* the setting */
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(root, "setting");
    long slots, overlap, mb, rows;
    if (!cJSON_IsObject(sj)) {
        rc = dev_err_set(err, MEMRA_E_INVAL, "%s=%s: key \"setting\" must be an object", from, path);
        goto fail;
    }
    if ((rc = get_ints(sj, "cuts", (int)N - 1, 1, model->n_layer - 1, from, path, cuts, err)) ||
        (rc = get_int(sj, "slots", 1, MEMRA_MAX_SLOTS, from, path, &slots, err)) ||
        (rc = get_int(sj, "overlap", 0, 1, from, path, &overlap, err)) ||
        (rc = get_int(sj, "micro_batches", 0, 1L << 20, from, path, &mb, err)) ||
        (rc = get_int(sj, "max_rows", 1, 1L << 20, from, path, &rows, err)))
        goto fail;
    long graph = 0; /* optional: absent = eager walks */
    if (cJSON_GetObjectItemCaseSensitive(sj, "graph") && (rc = get_int(sj, "graph", 0, 1, from, path, &graph, err)))
        goto fail;
    p->stages = (int)N;
    p->n_cuts = (int)N - 1;
    memcpy(p->cuts, cuts, (size_t)(N - 1) * sizeof *cuts);
    p->n_devices = (int)N;
    memcpy(p->devices, dev, (size_t)N * sizeof *dev);
    p->slots = (int)slots;
    p->overlap = (int)overlap;
    p->graph = (int)graph;
    p->micro_batches = (int)mb;
    p->max_rows = (int)rows;
fail:
    cJSON_Delete(root);
    free(text);
    return rc;
}
#endif

int api_profile_apply(const memra_model *model, memra_runtime_params *p, dev_err *err)
{
    const char *env = p->apply_env ? getenv("MEMRA_PP_PROFILE") : NULL;
    const char *path = env ? env : p->profile, *from = env ? "MEMRA_PP_PROFILE" : "memra_runtime_params.profile";
    if (!path)
        return 0;
    if (!*path)
        return dev_err_set(err, MEMRA_E_INVAL, "%s is set but empty: expected the path of a memra-tune profile (.json)",
                           from);
#ifdef MEMRA_HAVE_CJSON
    memra_runtime_params q = *p; /* *p unchanged on failure */
    int rc = apply(model, &q, from, path, err);
    if (rc == 0)
        *p = q;
    return rc;
#else
    (void)model;
    return dev_err_set(err, MEMRA_E_UNSUPPORTED, "%s=%s: this build of memra lacks cJSON (libcjson-dev), which "
                       "reading a profile needs", from, path);
#endif
}
