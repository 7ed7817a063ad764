/* Internal to actors/: the two primitives every blocking path here is built on.
 *   - a futex on a 32-bit word (Linux SYS_futex, process-private): sleep while *w == expected, wake n;
 *   - ThreadSanitizer hand-off annotations. liburcu 0.13's atomics are inline asm that TSan cannot see,
 *     so in TSan builds (MEMRA_TSAN) every hand-off of a message through a liburcu structure is declared
 *     by hand: ACT_TSAN_RELEASE(m) right before the push/enqueue, ACT_TSAN_ACQUIRE(m) right after the
 *     pop/dequeue that returned m. In other builds both are empty.
 *   - liburcu inlines: the actors/ sources define _LGPL_SOURCE (inline fast paths) only in normal builds. TSan
 *     builds must not (the inlines' plain loads would be flagged), and ASan+UBSan builds do not either:
 *     the inline lfstack forms `&head->node` from a NULL head (liburcu's end-of-stack idiom), which
 *     UBSan reports as a member access within a null pointer.
 * Not for use outside actors/ (the public headers never include it). */
#ifndef ACT_SYNC_H
#define ACT_SYNC_H

#include <stdatomic.h>
#include <stdint.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef MEMRA_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define ACT_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define ACT_TSAN_RELEASE(p) __tsan_release((void *)(p))
#else
#define ACT_TSAN_ACQUIRE(p) ((void)0)
#define ACT_TSAN_RELEASE(p) ((void)0)
#endif

/* Sleep while *w == expected (returns at once when it differs; may return spuriously: callers loop on
 * their own condition). Cost: one syscall. */
static inline void act_futex_wait(_Atomic uint32_t *w, uint32_t expected)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

/* Wake up to n threads sleeping on w. Cost: one syscall. */
static inline void act_futex_wake(_Atomic uint32_t *w, int n)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Full memory barrier (store-load ordering for the Dekker-style sleep protocols here). TSan does not
 * support atomic_thread_fence; in TSan builds a seq_cst RMW on a private word stands in (TSan models no
 * store-load reordering anyway; x86 orders it with the locked instruction). */
static inline void act_full_fence(void)
{
#ifdef MEMRA_TSAN
    static _Atomic uint32_t act_fence_word;
    atomic_fetch_add_explicit(&act_fence_word, 0, memory_order_seq_cst);
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Pause hint for bounded spin loops. */
static inline void act_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

#endif
