/* memra-bench: the project's benchmarks, one subcommand each (docs/bench/ records their results). */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "memra/memra.h"

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
    {"cpu-kernels", bench_cpu_kernels, "us per CPU matmul call: the fast mode's int8 GEMM (blocks, rows of 8) and the exact f32 dot"},
    {"gpu-kernels", bench_gpu_kernels, "CUDA GEMV bandwidth per weight type on an 8B-shaped layer (--attention: the attention kernel)"},
};

int main(int argc, char **argv)
{
    /* under mpirun: rank 0 runs the subcommand, every other rank serves its stages (docs/scale-out.md); hop runs
     * on ranks 0 and 1 (the MPI wire's ping-pong) */
    const int rank = memra_mpi_init(&argc, &argv);
    if (rank < 0) {
        fprintf(stderr, "memra-bench: %s\n", memra_last_error());
        return 2;
    }
    const int hop = argc >= 2 && strcmp(argv[1], "hop") == 0;
    if (rank > 0 && !hop) {
        int sr = memra_mpi_serve();
        if (sr != MEMRA_OK)
            fprintf(stderr, "memra-bench (rank %d): %s\n", rank, memra_last_error());
        memra_mpi_finish(sr);
        return sr != MEMRA_OK;
    }
    if (argc >= 2)
        for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
            if (strcmp(argv[1], cmds[i].name) == 0) {
                int r = cmds[i].fn(argc - 1, argv + 1);
                if (r == BENCH_HELP) /* -h: the usage is out */
                    r = 0;
                /* hop: both ranks end by themselves (no runtime to serve); the others leave the serve loop */
                if (hop && rank > 0)
                    memra_mpi_finish(MEMRA_OK);
                else
                    memra_mpi_finish(r ? MEMRA_E_STATE : MEMRA_OK);
                return r;
            }
    FILE *f = argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? stdout : stderr;
    if (f == stderr && argc >= 2)
        fprintf(stderr, "memra-bench: unknown subcommand '%s'\n", argv[1]);
    fprintf(f, "usage: memra-bench <subcommand> [options]   (subcommand -h for its options)\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].what);
    return f == stdout ? 0 : 2;
}
