/* tests/support/jitter.h. Shared mutable state: jitter_counter (relaxed atomic add by every hooked worker). */
#include <time.h>

#include "support/jitter.h"

static unsigned long jitter_counter;

void test_jitter_hook(void *ctx, dev_stream *s, const char *op)
{
    (void)s, (void)op;
    const test_jitter *j = ctx;
    unsigned long x = __atomic_add_fetch(&jitter_counter, 0x9E3779B97F4A7C15ul, __ATOMIC_RELAXED);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ul;
    x ^= x >> 29;
    if ((int)(x % (unsigned long)j->den) >= j->num)
        return;
    struct timespec ts = { 0, (long)(x % (unsigned long)j->max_us) * 1000 };
    nanosleep(&ts, NULL);
}
