/* A growable FIFO ring of fixed-size elements, owned by one thread (a stage actor's waiting steps, the MPI
 * transport actor's queues). The ring is (buf, head, len, cap): elements head .. head+len-1, modulo cap. */
#ifndef ACT_RING_H
#define ACT_RING_H

#include <stdlib.h>
#include <string.h>
#include "memra/status.h"

/* Makes room for one more element: when full, moves the len elements into a buffer twice as large (16 when
 * empty), unwrapped to start at 0. Returns 0 or MEMRA_E_NOMEM (the ring unchanged). Costs O(len) when it grows. */
static inline int act_ring_reserve(void **buf, int *head, int len, int *cap, size_t elem)
{
    if (len < *cap)
        return 0;
    const int n = *cap ? 2 * *cap : 16;
    char *q = malloc((size_t)n * elem);
    if (!q)
        return MEMRA_E_NOMEM;
    const int first = *cap - *head < len ? *cap - *head : len; /* from head to the end of the old buffer */
    if (len > 0) {
        memcpy(q, (char *)*buf + (size_t)*head * elem, (size_t)first * elem);
        memcpy(q + (size_t)first * elem, *buf, (size_t)(len - first) * elem);
    }
    free(*buf);
    *buf = q;
    *head = 0;
    *cap = n;
    return 0;
}

#endif
