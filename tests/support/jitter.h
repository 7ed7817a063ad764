/* A dev_op_hook for stress tests: sleeps a random 0..max_us microseconds before some stream ops, so
 * workers interleave differently on every run. Install with dev_set_op_hook(p, test_jitter_hook, &cfg). */
#ifndef TESTS_SUPPORT_JITTER_H
#define TESTS_SUPPORT_JITTER_H

#include "device/dev.h"

typedef struct test_jitter {
    int num, den; /* an op sleeps with probability num/den */
    int max_us;   /* at most this long */
} test_jitter;

/* ctx: a const test_jitter * that outlives the hook. Thread-safe: the random stream is an xorshift of one
 * atomic counter (relaxed), so hooking workers never share a state and never race on one. */
void test_jitter_hook(void *ctx, dev_stream *s, const char *op);

#endif
