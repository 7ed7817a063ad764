/* Test helper: see model_ref.h. No shared state. */
#include "support/model_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
