/* The seeded generator of the CPU kernel tests (a 64-bit LCG): per-test seeds keep each case's data fixed. */
#ifndef MEMRA_TEST_RAND_H
#define MEMRA_TEST_RAND_H

#include <stdint.h>

/* Advance *state and return a float uniform in [-1, 1) (24 random bits). */
static inline float test_frand(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

#endif
