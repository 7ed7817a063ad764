/* Shared by the memra-bench subcommands: flag parsing (every value checked, nothing silently ignored), the
 * clock and a sort for medians. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

int bench_parse(const char *cmd, int argc, char **argv, const bench_flag *flags, int n, const char *usage)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: memra-bench %s %s\n", cmd, usage);
            return BENCH_HELP;
        }
    for (int i = 1; i < argc; i++) {
        const bench_flag *f = NULL;
        for (int k = 0; k < n && !f; k++)
            if (!strcmp(argv[i], flags[k].name))
                f = &flags[k];
        if (!f) {
            fprintf(stderr, "memra-bench %s: unknown option '%s'\nusage: memra-bench %s %s\n", cmd, argv[i], cmd,
                    usage);
            return 2;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (f->sval) {
            if (!v) {
                fprintf(stderr, "memra-bench %s: %s needs a value\n", cmd, f->name);
                return 2;
            }
            *f->sval = v;
            continue;
        }
        if (bench_int(cmd, f->name, v, f->lo, f->hi, f->ival))
            return 2;
    }
    return 0;
}

int bench_int(const char *cmd, const char *name, const char *v, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "memra-bench %s: %s %s: expected an integer %d..%d\n", cmd, name, v ? v : "(missing)", lo, hi);
        return 2;
    }
    *out = (int)x;
    return 0;
}

double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t bench_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

float bench_rand_unit(uint64_t *s)
{
    return (float)((int)(bench_xorshift(s) % 2001) - 1000) / 1000.0f;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
}
