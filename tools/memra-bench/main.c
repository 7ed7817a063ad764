/* memra-bench: benchmark programs. `memra-bench <subcommand> [options]`. Speed is reported, never
 * asserted. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

typedef struct bench_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} bench_cmd;

static const bench_cmd cmds[] = {
    { "mailbox", bench_mailbox, "hand-off latency of the actor mailbox between two threads" },
};

static int usage(FILE *out)
{
    fprintf(out, "usage: memra-bench <subcommand> [options]   (memra-bench <subcommand> --help)\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(out, "  %-10s %s\n", cmds[i].name, cmds[i].what);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "memra-bench: unknown subcommand '%s'\n", argv[1]);
    return usage(stderr);
}
