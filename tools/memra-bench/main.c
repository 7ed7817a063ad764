/* memra-bench: the project's benchmarks, one subcommand each (docs/bench/ records their results). */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} cmds[] = {
    {"mailbox", bench_mailbox, "median/p99 hand-off latency between two actor threads"},
    {"decode", bench_decode, "single-stage CPU prefill and decode tokens/s on a model"},
    {"hop", bench_hop, "one boundary hop (copy + ev_tx + cross-stream wait) per transport and slot count"},
    {"pp-scaling", bench_pp_scaling, "PP-1 vs PP-N tokens/s with S sequences in flight, busy/bubble per stage"},
    {"prime", bench_prime, "chunked prefill of a long prompt: unsplit walk vs PP-N chunk pipeline"},
    {"sample", bench_sample, "host time to pick a token from a vocabulary of logits (argmax, sampler)"},
    {"serve", bench_serve, "tokens/s of S requests through the serving scheduler against one alone, and the ratio"},
    {"tokenize", bench_tokenize, "host time to tokenize long texts (a model's vocab; many user-defined tokens)"},
    {"gpu-kernels", bench_gpu_kernels, "CUDA GEMV bandwidth per weight type on an 8B-shaped layer (--attention: the attention kernel)"},
};

int main(int argc, char **argv)
{
    if (argc >= 2)
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
            if (strcmp(argv[1], cmds[i].name) == 0)
                return cmds[i].fn(argc - 1, argv + 1);
    FILE *f = argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? stdout : stderr;
    fprintf(f, "usage: memra-bench <subcommand> [options]   (subcommand -h for its options)\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].what);
    return f == stdout ? 0 : 2;
}
