/* Test helper: see model_ref.h. No shared state. */
#include "support/model_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/err.h"

/* Parse "id:val id:val ..." after the 2-char tag; returns the count. */
static int parse_pairs(const char *line, int cap, int *ids, double *vals)
{
    const char *c = line + 2;
    int n = 0;
    while (*c && n < cap) {
        char *end;
        long id = strtol(c, &end, 10);
        if (end == c || *end != ':')
            break;
        ids[n] = (int)id;
        vals[n] = strtod(end + 1, &end);
        c = end;
        n++;
    }
    return n;
}

int model_ref_load(const char *rel, model_ref *r)
{
    const char *src = getenv("MEMRA_SRC_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "model_ref: cannot open %s\n", path);
        return -1;
    }
    memset(r, 0, sizeof *r);
    static char line[65536];
    model_ref_step *cur = NULL;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *end;
        if (line[0] == 'Q' || line[0] == 'P' || line[0] == 'S') {
            const long pi = strtol(line + 2, &end, 10);
            if (pi < 0 || pi >= MODEL_REF_PROMPTS) {
                rc = -1;
                break;
            }
            model_ref_prompt *p = &r->prompt[pi];
            if (pi + 1 > r->n_prompt)
                r->n_prompt = (int)pi + 1;
            if (line[0] == 'Q') {
                snprintf(p->text, sizeof p->text, "%s", *end ? end + 1 : "");
            } else if (line[0] == 'P') {
                p->n = (int)strtol(end, &end, 10);
                if (p->n <= 0 || p->n > MODEL_REF_TOKENS) {
                    rc = -1;
                    break;
                }
                for (int i = 0; i < p->n; i++)
                    p->ids[i] = (int32_t)strtol(end, &end, 10);
            } else {
                const long st = strtol(end, &end, 10);
                if (st < 0 || st >= MODEL_REF_STEPS) {
                    rc = -1;
                    break;
                }
                cur = &p->step[st];
                if (st + 1 > p->n_steps)
                    p->n_steps = (int)st + 1;
                if (sscanf(end, "%d %d %lf %lf %lf", &cur->fed, &cur->argmax, &cur->lse, &cur->mean, &cur->std) != 5) {
                    rc = -1;
                    break;
                }
            }
        } else if (line[0] == 'T' && cur) {
            cur->n_top = parse_pairs(line, MODEL_REF_TOP, cur->top_id, cur->top);
        } else if (line[0] == 'F' && cur) {
            cur->n_probe = parse_pairs(line, MODEL_REF_PROBES, cur->probe_id, cur->probe);
        }
    }
    fclose(f);
    if (rc || !r->n_prompt)
        fprintf(stderr, "model_ref: %s is malformed\n", path);
    return rc || !r->n_prompt ? -1 : 0;
}

int model_ref_compare(const model_ref_step *rs, const float *lg, int n_vocab, double *diff)
{
    double d = 0, sum = 0, mean = 0, var = 0;
    int am = 0;
    for (int i = 0; i < rs->n_top; i++)
        d = fmax(d, fabs(lg[rs->top_id[i]] - rs->top[i]));
    for (int i = 0; i < rs->n_probe; i++)
        d = fmax(d, fabs(lg[rs->probe_id[i]] - rs->probe[i]));
    for (int i = 0; i < n_vocab; i++) {
        if (lg[i] > lg[am])
            am = i;
        mean += lg[i];
    }
    mean /= n_vocab;
    for (int i = 0; i < n_vocab; i++) {
        sum += exp((double)lg[i] - lg[am]);
        var += (lg[i] - mean) * (lg[i] - mean);
    }
    const double lse = lg[am] + log(sum), sd = sqrt(var / n_vocab);
    d = fmax(d, fmax(fabs(lse - rs->lse), fmax(fabs(mean - rs->mean), fabs(sd - rs->std))));
    *diff = d;
    return am;
}

int model_ref_teacher_force(model_rig *r, const model_ref *ref, double tol, model_ref_outcome *o, dev_err *err)
{
    memset(o, 0, sizeof *o);
    float *lg = malloc(sizeof(float) * MODEL_REF_TOKENS * (size_t)r->n_vocab);
    if (!lg)
        return dev_err_set(err, MEMRA_E_NOMEM, "model_ref: no memory for %d rows of logits", MODEL_REF_TOKENS);
    int rc = 0;
    for (int pi = 0; pi < ref->n_prompt && !rc; pi++) {
        const model_ref_prompt *rp = &ref->prompt[pi];
        for (int st = 0; st < rp->n_steps && !rc; st++) {
            const model_ref_step *rs = &rp->step[st];
            const int32_t *toks = st == 0 ? rp->ids : &rs->fed;
            const int B = st == 0 ? rp->n : 1, pos0 = st == 0 ? 0 : rp->n + st - 1;
            int32_t pos[MODEL_REF_TOKENS], seq[MODEL_REF_TOKENS];
            for (int b = 0; b < B; b++) {
                pos[b] = pos0 + b;
                seq[b] = pi;
            }
            if (toks[B - 1] != rs->fed) {
                rc = dev_err_set(err, MEMRA_E_INVAL, "model_ref: prompt %d step %d: the file feeds %d, the run %d", pi,
                                 st, rs->fed, toks[B - 1]);
                break;
            }
            if ((rc = model_rig_rows(r, toks, seq, pos, B, NULL, lg, err)))
                break;
            double diff;
            const int am = model_ref_compare(rs, lg + (size_t)(B - 1) * r->n_vocab, r->n_vocab, &diff);
            o->steps++;
            o->worst = diff > o->worst ? diff : o->worst;
            const int flip = am != rs->argmax, tie = rs->top[0] - rs->top[1] < tol;
            if (flip && tie)
                o->near_ties++;
            if (!o->fail[0] && diff > tol)
                snprintf(o->fail, sizeof o->fail, "prompt %d step %d: max |ours - oracle| = %g > %g", pi, st, diff,
                         tol);
            else if (!o->fail[0] && flip && !tie)
                snprintf(o->fail, sizeof o->fail, "prompt %d step %d: our top-1 %d != oracle %d (oracle gap %g)", pi,
                         st, am, rs->argmax, rs->top[0] - rs->top[1]);
        }
    }
    free(lg);
    return rc;
}

int model_ref_run(dev_platform *p, const char *path, const model_ref *ref, double tol, model_ref_outcome *o,
                  dev_err *err)
{
    memset(o, 0, sizeof *o);
    model_rig r;
    int rc = model_rig_open(&r, p, path, NULL, ref->n_prompt, MODEL_REF_TOKENS, MODEL_REF_TOKENS, err);
    if (rc)
        return rc;
    rc = model_ref_teacher_force(&r, ref, tol, o, err);
    model_rig_close(&r);
    return rc;
}

const char *model_ref_model_or_skip(const char *who)
{
    const char *path = getenv("MEMRA_MODEL");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        printf("%s: skipped: MEMRA_MODEL (%s) is not a readable file\n", who, path ? path : "unset");
        return NULL;
    }
    fclose(f);
    return path;
}
