/* Door parsing and the stage map. Shared mutable state: the warn_unwired table (guarded by warn_lock). */
#include "actors/doors.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

act_pp_config act_pp_config_default(void)
{
    act_pp_config c;
    memset(&c, 0, sizeof c);
    c.shard = 1;
    c.slots = 2;
    c.streams = 1;
    return c;
}

act_pp_seams act_pp_seams_default(void)
{
    act_pp_seams s = {.overlap = 0, .batch_pp = 1, .allow_unsplit_batch = 0, .spec_pp = 1,
                      .prime_pp = 1, .prime_pipe = 1, .pdl = 1, .graph = 0, .markers = 1, .same_device_pipe = 0,
                      .keys = 1, .head_ring = 1};
    return s;
}

int act_door_parse_int(const char *s, size_t len, long lo, long hi, long *out)
{
    if (!s || len == 0 || len > 18 || (len > 1 && s[0] == '0'))
        return -1;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0'); /* 18 digits stay below 2^63 */
    }
    if (v < lo || v > hi)
        return -1;
    *out = (long)v;
    return 0;
}

/* Reads an integer door. Returns 1 when set (value in *out), 0 when unset, MEMRA_E_INVAL when invalid. */
static int door_int(const char *name, long lo, long hi, const char *allowed, long *out, dev_err *err)
{
    const char *v = getenv(name);
    if (!v)
        return 0;
    if (act_door_parse_int(v, strlen(v), lo, hi, out) != 0)
        return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: not allowed; %s", name, v, allowed);
    return 1;
}

/* Parses a comma list of integers in [lo, hi] into out (cap entries). Returns the count or MEMRA_E_INVAL. */
static int door_list(const char *name, const char *v, long lo, long hi, const char *what, int *out, int cap,
                     dev_err *err)
{
    int n = 0;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        long x;
        if (len == 0)
            return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: empty element; expected a comma list of %s", name, v,
                               what);
        if (n == cap)
            return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: more than %d elements", name, v, cap);
        if (act_door_parse_int(p, len, lo, hi, &x) != 0)
            return dev_err_set(err, MEMRA_E_INVAL, "%s=%s: element '%.*s' is not %s", name, v, (int)len, p, what);
        out[n++] = (int)x;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

int act_doors_read_structural(act_pp_config *cfg_io, dev_err *err)
{
    act_pp_config c = *cfg_io;
    long v;
    int r;

    if ((r = door_int("MEMRA_PP_STAGES", 0, ACT_PP_MAX_STAGES, "expected an integer 0..64 (0/1 = door shut)", &v,
                      err)) < 0)
        return r;
    if (r == 1) {
        c.stages = (int)v;
        c.stages_env = 1;
    }

    const char *splits = getenv("MEMRA_PP_SPLITS"), *split = getenv("MEMRA_PP_SPLIT");
    if (splits && split)
        return dev_err_set(err, MEMRA_E_INVAL,
                           "MEMRA_PP_SPLITS=%s and MEMRA_PP_SPLIT=%s are both set: use one (SPLIT is the N=2 spelling)",
                           splits, split);
    if (split) {
        if (act_door_parse_int(split, strlen(split), 1, INT_MAX / 2, &v) != 0)
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_SPLIT=%s: expected one layer index > 0 (the N=2 cut)",
                               split);
        if (c.stages < 2 && c.stages_env)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_SPLIT=%s opens the 2-stage door but MEMRA_PP_STAGES=%d shuts it: unset one, "
                               "or set MEMRA_PP_STAGES=2",
                               split, c.stages);
        if (c.stages < 2)
            c.stages = 2; /* the N=2 back-compat spelling opens the 2-stage door */
        else if (c.stages != 2)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_SPLIT=%s is the N=2 spelling but MEMRA_PP_STAGES=%d: use MEMRA_PP_SPLITS with %d cuts",
                               split, c.stages, c.stages - 1);
        c.n_cuts = 1;
        c.cuts[0] = (int)v;
        c.cuts_env = 1;
    }
    if (splits && !strcmp(splits, "weights")) {
        if (c.stages < 2)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_SPLITS=weights is set but the pipeline door is shut: set MEMRA_PP_STAGES");
        c.balance = 1;
        splits = NULL; /* no list to parse */
    }
    if (splits) {
        int n = door_list("MEMRA_PP_SPLITS", splits, 1, INT_MAX / 2, "a layer index > 0", c.cuts, ACT_PP_MAX_STAGES,
                          err);
        if (n < 0)
            return n;
        if (c.stages < 2)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_SPLITS=%s is set but the pipeline door is shut: set MEMRA_PP_STAGES=%d",
                               splits, n + 1);
        if (n != c.stages - 1)
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_SPLITS=%s: %d cuts given, MEMRA_PP_STAGES=%d needs %d",
                               splits, n, c.stages, c.stages - 1);
        for (int i = 1; i < n; i++)
            if (c.cuts[i] <= c.cuts[i - 1])
                return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_SPLITS=%s: cuts must be strictly increasing", splits);
        c.n_cuts = n;
        c.cuts_env = 1;
    }

    const char *devs = getenv("MEMRA_PP_DEVICES");
    if (devs) {
        int n = door_list("MEMRA_PP_DEVICES", devs, 0, 1 << 20, "a device ordinal >= 0", c.devices,
                          ACT_PP_MAX_STAGES, err);
        if (n < 0)
            return n;
        if (c.stages < 2)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_DEVICES=%s is set but the pipeline door is shut: set MEMRA_PP_STAGES=%d", devs,
                               n);
        if (n != c.stages)
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_DEVICES=%s: %d devices given, MEMRA_PP_STAGES=%d needs %d",
                               devs, n, c.stages, c.stages);
        c.n_devices = n;
    }
    if ((r = door_int("MEMRA_PP_SHARD", 0, 1, "expected 0 (all weights on the primary) or 1 (per-stage)", &v, err)) <
        0)
        return r;
    if (r == 1)
        c.shard = (int)v;
    if ((r = door_int("MEMRA_PP_SLOTS", 1, ACT_PP_MAX_SLOTS, "expected 1..16 slots per boundary", &v, err)) < 0)
        return r;
    if (r == 1)
        c.slots = (int)v;
    if ((r = door_int("MEMRA_PP_STREAMS", 0, 1, "expected 0 (one-stream seam) or 1 (per-stage streams)", &v, err)) <
        0)
        return r;
    if (r == 1)
        c.streams = (int)v;

    const char *nccl = getenv("MEMRA_PP_NCCL"); /* the transport of a CUDA boundary between ranks */
    if (nccl) {
        if (!strcmp(nccl, "auto"))
            c.nccl = ACT_NCCL_AUTO;
        else if (!strcmp(nccl, "0"))
            c.nccl = ACT_NCCL_OFF;
        else
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_NCCL=%s: not allowed; expected auto (NCCL between two "
                               "ranks' GPUs when it can, the default) or 0 (host-staged MPI)", nccl);
    }

    int r2 = act_pp_config_check(&c, err);
    if (r2 != 0)
        return r2;
    act_pp_seams seams = act_pp_seams_default(); /* the seams' current values, so create names a bad one */
    if ((r2 = act_doors_read_seams(&seams, err)) != 0)
        return r2;
    *cfg_io = c;
    return 0;
}

int act_pp_config_check(const act_pp_config *c, dev_err *err)
{
    if (c->stages < 0 || c->stages > ACT_PP_MAX_STAGES)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: stages=%d, allowed 0..%d", c->stages,
                           ACT_PP_MAX_STAGES);
    if (c->slots < 1 || c->slots > ACT_PP_MAX_SLOTS)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: slots=%d, allowed 1..%d", c->slots, ACT_PP_MAX_SLOTS);
    if ((c->shard != 0 && c->shard != 1) || (c->streams != 0 && c->streams != 1))
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: shard=%d streams=%d, each allowed 0 or 1", c->shard,
                           c->streams);
    if (c->nccl != ACT_NCCL_AUTO && c->nccl != ACT_NCCL_OFF)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: nccl=%d, allowed %d (auto) or %d (off)", c->nccl,
                           ACT_NCCL_AUTO, ACT_NCCL_OFF);
    if (c->stages < 2)
        return 0;
    if (c->balance && c->n_cuts)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: balance and %d explicit cuts (use one)", c->n_cuts);
    if (c->balance != 0 && c->balance != 1)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: balance=%d, allowed 0 or 1", c->balance);
    if (c->n_cuts && c->n_cuts != c->stages - 1)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: %d cuts for %d stages (need %d)", c->n_cuts,
                           c->stages, c->stages - 1);
    for (int i = 1; i < c->n_cuts; i++)
        if (c->cuts[i] <= c->cuts[i - 1])
            return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: cuts must be strictly increasing (%d after %d)",
                               c->cuts[i], c->cuts[i - 1]);
    if (c->n_devices && c->n_devices != c->stages)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: %d devices for %d stages", c->n_devices, c->stages);
    for (int s = 0; s < c->n_devices; s++)
        if (c->devices[s] < 0)
            return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: stage %d on device %d (ordinals are >= 0)", s,
                               c->devices[s]);
    if (!c->streams)
        for (int s = 1; s < c->n_devices; s++)
            if (c->devices[s] != c->devices[0])
                return dev_err_set(err, MEMRA_E_INVAL,
                                   "MEMRA_PP_STREAMS=0 is the one-stream, one-device seam but MEMRA_PP_DEVICES places "
                                   "stages on several devices: unset one of them");
    return 0;
}

/* Every seam: its door and its field, in act_pp_seams' declaration order (the bit of act_pp_seams_pack). */
static const struct {
    const char *name;
    const char *field;
    size_t off;
} seam_tab[ACT_PP_N_SEAMS] = {
    {"MEMRA_PP_OVERLAP", "overlap", offsetof(act_pp_seams, overlap)},
    {"MEMRA_BATCH_PP", "batch_pp", offsetof(act_pp_seams, batch_pp)},
    {"MEMRA_PP_ALLOW_UNSPLIT_BATCH", "allow_unsplit_batch", offsetof(act_pp_seams, allow_unsplit_batch)},
    {"MEMRA_SPEC_PP", "spec_pp", offsetof(act_pp_seams, spec_pp)},
    {"MEMRA_PRIME_PP", "prime_pp", offsetof(act_pp_seams, prime_pp)},
    {"MEMRA_PRIME_PIPE", "prime_pipe", offsetof(act_pp_seams, prime_pipe)},
    {"MEMRA_PDL", "pdl", offsetof(act_pp_seams, pdl)},
    {"MEMRA_PP_GRAPH", "graph", offsetof(act_pp_seams, graph)},
    {"MEMRA_PP_MARKERS", "markers", offsetof(act_pp_seams, markers)},
    {"MEMRA_PP_SAME_DEVICE_PIPE", "same_device_pipe", offsetof(act_pp_seams, same_device_pipe)},
    {"MEMRA_PP_KEYS", "keys", offsetof(act_pp_seams, keys)},
    {"MEMRA_PP_HEAD_RING", "head_ring", offsetof(act_pp_seams, head_ring)},
};
_Static_assert(sizeof(act_pp_seams) == ACT_PP_N_SEAMS * sizeof(int), "seam_tab lists every seam");

static int *seam_at(act_pp_seams *s, int i) { return (int *)((char *)s + seam_tab[i].off); }
static int seam_get(const act_pp_seams *s, int i) { return *(const int *)((const char *)s + seam_tab[i].off); }

int act_doors_read_seams(act_pp_seams *seams, dev_err *err)
{
    act_pp_seams s = *seams;
    for (int i = 0; i < ACT_PP_N_SEAMS; i++) {
        long v;
        int r = door_int(seam_tab[i].name, 0, 1, "expected 0 (off) or 1 (on)", &v, err);
        if (r < 0)
            return r;
        if (r == 1)
            *seam_at(&s, i) = (int)v;
    }
    *seams = s;
    return 0;
}

int act_pp_seams_check(const act_pp_seams *seams, dev_err *err)
{
    for (int i = 0; i < ACT_PP_N_SEAMS; i++) {
        const int v = seam_get(seams, i);
        if (v != 0 && v != 1)
            return dev_err_set(err, MEMRA_E_INVAL, "pipeline seams: %s = %d (the seam %s; allowed 0 or 1)",
                               seam_tab[i].field, v, seam_tab[i].name);
    }
    return 0;
}

uint32_t act_pp_seams_pack(const act_pp_seams *seams)
{
    uint32_t bits = 0;
    for (int i = 0; i < ACT_PP_N_SEAMS; i++)
        bits |= (uint32_t)(seam_get(seams, i) != 0) << i;
    return bits;
}

act_pp_seams act_pp_seams_unpack(uint32_t bits)
{
    act_pp_seams s;
    for (int i = 0; i < ACT_PP_N_SEAMS; i++)
        *seam_at(&s, i) = (int)(bits >> i & 1u);
    return s;
}

int act_pp_config_same(const act_pp_config *a, const act_pp_config *b, char *what, size_t cap)
{
    const int na = a->stages < 2 ? 1 : a->stages, nb = b->stages < 2 ? 1 : b->stages;
#define DIFF(...) return snprintf(what, cap, __VA_ARGS__), 0
    if (na != nb)
        DIFF("MEMRA_PP_STAGES / stages: %d, the runtime has %d", na, nb);
    if (na == 1)
        return 1; /* the door shut: nothing else shapes it */
    if (a->balance != b->balance || a->n_cuts != b->n_cuts ||
        memcmp(a->cuts, b->cuts, (size_t)a->n_cuts * sizeof a->cuts[0]) != 0)
        DIFF("MEMRA_PP_SPLITS / cuts: other cuts than the runtime's");
    for (int s = 0; s < na; s++)
        if (act_stage_device(a, s) != act_stage_device(b, s))
            DIFF("MEMRA_PP_DEVICES / devices: stage %d on device %d, the runtime has it on %d", s,
                 act_stage_device(a, s), act_stage_device(b, s));
    if (a->shard != b->shard)
        DIFF("MEMRA_PP_SHARD / shard: %d, the runtime has %d", a->shard, b->shard);
    if (a->slots != b->slots)
        DIFF("MEMRA_PP_SLOTS / slots: %d, the runtime has %d", a->slots, b->slots);
    if (a->streams != b->streams)
        DIFF("MEMRA_PP_STREAMS / streams: %d, the runtime has %d", a->streams, b->streams);
    if (a->nccl != b->nccl)
        DIFF("MEMRA_PP_NCCL / nccl: %s, the runtime has %s", a->nccl == ACT_NCCL_OFF ? "0" : "auto",
             b->nccl == ACT_NCCL_OFF ? "0" : "auto");
#undef DIFF
    return 1;
}

/* Cuts for n stages over n_layers minimizing the largest stage's cost (w[0..n_layers-1] per layer, w[n_layers]
 * the head on the last stage): the linear-partition DP, O(n * n_layers^2); best[s][i] = the smallest
 * possible largest stage when stages 0..s hold layers [0, i). Ties keep the earliest cut. */
static int balanced_cuts(int n, int n_layers, const double *w, int *fence, dev_err *err)
{
    const size_t cells = (size_t)n * (size_t)(n_layers + 1);
    double *best = malloc(cells * sizeof *best), *pre = malloc((size_t)(n_layers + 1) * sizeof *pre);
    int *from = malloc(cells * sizeof *from);
    if (!best || !pre || !from) {
        free(best), free(pre), free(from);
        return dev_err_set(err, MEMRA_E_NOMEM, "MEMRA_PP_SPLITS=weights: no memory for %d stages x %d layers", n,
                           n_layers);
    }
    pre[0] = 0.0;
    for (int i = 0; i < n_layers; i++)
        pre[i + 1] = pre[i] + w[i];
#define AT(s, i) ((size_t)(s) * (size_t)(n_layers + 1) + (size_t)(i))
    for (int i = 0; i <= n_layers; i++)
        best[AT(0, i)] = pre[i], from[AT(0, i)] = 0;
    for (int s = 1; s < n; s++)
        for (int i = s + 1; i <= n_layers; i++) { /* stages 0..s over [0, i): at least one layer each */
            const double tail = s == n - 1 && i == n_layers ? w[n_layers] : 0.0;
            best[AT(s, i)] = -1.0;
            for (int j = s; j < i; j++) { /* stage s holds [j, i) */
                const double here = pre[i] - pre[j] + tail, prev = best[AT(s - 1, j)];
                const double m = here > prev ? here : prev;
                if (best[AT(s, i)] < 0.0 || m < best[AT(s, i)])
                    best[AT(s, i)] = m, from[AT(s, i)] = j;
            }
        }
    fence[n] = n_layers;
    for (int s = n - 1, i = n_layers; s >= 1; s--)
        i = fence[s] = from[AT(s, i)];
    fence[0] = 0;
#undef AT
    free(best), free(pre), free(from);
    return 0;
}

int act_pp_cuts(const act_pp_config *c, int n_layers, int n_devices_avail, const double *weight_cost, int *fence,
                dev_err *err)
{
    int n = c->stages;
    if (n < 2)
        return 0;
    if (n > ACT_PP_MAX_STAGES)
        return dev_err_set(err, MEMRA_E_INVAL, "pipeline config: stages=%d, allowed up to %d", n, ACT_PP_MAX_STAGES);
    if (n > n_layers)
        return dev_err_set(err, MEMRA_E_INVAL, c->stages_env ? "MEMRA_PP_STAGES=%d: more stages than the model's %d layers"
                                                             : "memra_runtime_params.stages=%d (memra-run --stages): more "
                                                               "stages than the model's %d layers",
                           n, n_layers);
    if (c->balance) {
        if (!weight_cost)
            return dev_err_set(err, MEMRA_E_INVAL, "MEMRA_PP_SPLITS=weights needs the model's weight cost per layer");
        int r = balanced_cuts(n, n_layers, weight_cost, fence, err);
        if (r)
            return r;
    } else {
        fence[0] = 0;
        fence[n] = n_layers;
        for (int s = 1; s < n; s++) {
            int cut = c->n_cuts ? c->cuts[s - 1] : s * n_layers / n;
            const char *from = !c->n_cuts ? "the even split" : c->cuts_env ? "MEMRA_PP_SPLITS"
                                                                         : "memra_runtime_params.cuts";
            if (cut <= 0 || cut >= n_layers)
                return dev_err_set(err, MEMRA_E_INVAL, "%s: cut %d is outside (0, %d) for this model", from, cut,
                                   n_layers);
            if (cut <= fence[s - 1])
                return dev_err_set(err, MEMRA_E_INVAL, "%s: cuts must be strictly increasing (%d after %d)", from,
                                   cut, fence[s - 1]);
            fence[s] = cut;
        }
    }
    for (int s = 0; s < c->n_devices; s++)
        if (c->devices[s] >= n_devices_avail)
            return dev_err_set(err, MEMRA_E_INVAL,
                               "MEMRA_PP_DEVICES: stage %d on device %d, but the backend has devices 0..%d", s,
                               c->devices[s], n_devices_avail - 1);
    return n;
}

int act_stage_of(const int *fence, int n_stages, int il)
{
    for (int s = 0; s < n_stages; s++)
        if (il < fence[s + 1])
            return s;
    return n_stages - 1; /* trailing (MTP/NextN) blocks belong to the last stage */
}

int act_pp2_split(const act_pp_config *c, int n_layers)
{
    int fence[3];
    if (c->stages != 2 || c->balance || act_pp_cuts(c, n_layers, 1 << 20, NULL, fence, NULL) != 2)
        return -1;
    return fence[1];
}

int act_stage_device(const act_pp_config *c, int s)
{
    return (c->stages >= 2 && c->n_devices) ? c->devices[s] : 0;
}

int act_pp_streams_share_device(const act_pp_config *c, int n, const int *owner)
{
    if (!owner)
        return act_pp_multi_stream_same_device(c);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (owner[a] == owner[b] && act_stage_device(c, a) == act_stage_device(c, b))
                return 1;
    return 0;
}

int act_pp_multi_stream_same_device(const act_pp_config *c)
{
    if (c->stages < 2)
        return 0;
    if (!c->n_devices)
        return 1;
    for (int a = 0; a < c->n_devices; a++)
        for (int b = a + 1; b < c->n_devices; b++)
            if (c->devices[a] == c->devices[b])
                return 1;
    return 0;
}

int act_pp_sharded_cross_device(const act_pp_config *c)
{
    if (c->stages < 2 || !c->n_devices || !c->shard)
        return 0;
    for (int s = 1; s < c->n_devices; s++)
        if (c->devices[s] != c->devices[0])
            return 1;
    return 0;
}

int act_refuse_unsplit_if_remote(const act_pp_config *c, const char *path, const char *alt, dev_err *err)
{
    if (!act_pp_sharded_cross_device(c))
        return 0;
    return dev_err_set(err, MEMRA_E_REFUSED,
                       "%s refused: it would walk the whole trunk on one stream while the pipeline's sharded "
                       "placement keeps some layers' weights on other devices (remote reads every step). Use %s, "
                       "or MEMRA_PP_ALLOW_UNSPLIT_BATCH=1 to measure the unsplit walk anyway",
                       path, alt);
}

/* warn_unwired_once: paths that already warned; guarded by warn_lock (any submitting thread). */
static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *warned[64];
static int n_warned;

static int warned_index(const char *path)
{
    for (int i = 0; i < n_warned; i++)
        if (strcmp(warned[i], path) == 0)
            return i;
    return -1;
}

int act_warn_unwired_once(const char *path)
{
    int printed = 0;
    pthread_mutex_lock(&warn_lock);
    if (warned_index(path) < 0 && n_warned < 64) {
        warned[n_warned++] = path;
        printed = 1;
    }
    pthread_mutex_unlock(&warn_lock);
    if (printed)
        fprintf(stderr, "memra: pipeline door is open but %s has no stage split; it runs unsplit\n", path);
    return printed;
}

int act_warn_unwired_count(const char *path)
{
    pthread_mutex_lock(&warn_lock);
    int r = warned_index(path) >= 0;
    pthread_mutex_unlock(&warn_lock);
    return r;
}

void act_warn_unwired_reset(void)
{
    pthread_mutex_lock(&warn_lock);
    n_warned = 0;
    pthread_mutex_unlock(&warn_lock);
}
