/* Flag parsing shared by the memra-bench subcommands: every value checked, nothing silently ignored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int bench_parse(const char *cmd, int argc, char **argv, const bench_flag *flags, int n, const char *usage)
{
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
        char *end;
        errno = 0;
        long x = v ? strtol(v, &end, 10) : 0;
        if (!v || !*v || *end || errno || x < f->lo || x > f->hi) {
            fprintf(stderr, "memra-bench %s: %s %s: expected an integer %d..%d\n", cmd, f->name, v ? v : "(missing)",
                    f->lo, f->hi);
            return 2;
        }
        *f->ival = (int)x;
    }
    return 0;
}
