/* CPU backend: vector clocks and the stream-order race checker.
 *
 * Clocks. Slot 0 is the host; every live stream holds one slot. Enqueuing an op on stream s ticks s's slot
 * and gives the op clock = join(s's clock, host clock) (+ the bound record's clock for a wait). A record
 * snapshots its op's clock; host-synchronous calls (stream/event sync, a completed query, stream destroy)
 * join what they learned into the host clock. Clocks are computed at ENQUEUE, so they do not depend on
 * when workers run.
 * Checker. Each allocation keeps its last write (slot, tick) and the last read per slot since. An op checks
 * at EXECUTION (under reg_lock) that it is ordered after the conflicting previous access: op.vc[slot] >=
 * tick. For two unordered accesses X, Y whichever runs second sees the first in the state and is flagged,
 * so a missing wait is reported in every real-time order; ordered accesses run in their order (waits do
 * block), so a correct program reports nothing.
 * Shared state: vc_lock guards slots and clocks; reg_lock guards allocation state and reports (cpu.h). */
#include "device/cpu/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cpu_vc_join(uint64_t *dst, const uint64_t *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (src[i] > dst[i])
            dst[i] = src[i];
}

int cpu_slot_acquire__(cpu_platform *p, const char *name, uint32_t *slot)
{
    for (uint32_t i = 1; i < CPU_MAX_SLOTS; i++) {
        if (!p->slot_used[i]) {
            p->slot_used[i] = 1;
            if (i + 1 > p->n_slots)
                p->n_slots = i + 1;
            *slot = i;
            return 0;
        }
    }
    return MEMRA_E_FULL;
}

/* The slot's tick survives: a later stream on it continues above every tick already handed out, and the
 * host clock already covers the old stream (destroy synced it). */
void cpu_slot_release__(cpu_platform *p, uint32_t slot) { p->slot_used[slot] = 0; }

void cpu_alloc_state_free(cpu_alloc *a)
{
    free(a->reads);
    a->reads = NULL;
    a->n_reads = a->cap_reads = 0;
    a->has_write = 0;
}

static int ordered(const cpu_acc_rec *r, uint32_t slot, const cpu_vc *vc)
{
    if (r->slot == slot)
        return 1; /* same stream (or the host): program order */
    uint64_t t = r->slot < vc->n ? vc->t[r->slot] : 0;
    return t >= r->tick;
}

static void report__(cpu_platform *p, cpu_alloc *a, const char *what, const char *stream, const char *op,
                     const char *prev_what, const cpu_acc_rec *prev)
{
    p->race_count++;
    if (p->race_count == 1)
        snprintf(p->race_first, sizeof p->race_first,
                 "race: %s op '%s' %s buf %p (%s, %zu B) last %s by %s op '%s' at op %llu, no event orders it",
                 stream, op, what, (void *)a->base, a->owner->base.name, a->size, prev_what, prev->stream,
                 prev->op, (unsigned long long)prev->tick);
}

static void rec_set(cpu_acc_rec *r, uint32_t slot, uint64_t tick, const char *stream, const char *op)
{
    r->slot = slot;
    r->tick = tick;
    snprintf(r->stream, sizeof r->stream, "%s", stream);
    snprintf(r->op, sizeof r->op, "%s", op);
}

void cpu_race_access__(cpu_platform *p, cpu_alloc *a, int mode, uint32_t slot, const cpu_vc *vc,
                       const char *stream, const char *op)
{
    uint64_t tick = slot < vc->n ? vc->t[slot] : 0;
    int raced = 0;
    if (a->has_write && !ordered(&a->write, slot, vc)) {
        report__(p, a, (mode & DEV_WRITE) ? "wrote" : "read", stream, op, "written", &a->write);
        raced = 1;
    }
    if ((mode & DEV_WRITE) && !raced) {
        for (int i = 0; i < a->n_reads; i++) {
            if (!ordered(&a->reads[i], slot, vc)) {
                report__(p, a, "wrote", stream, op, "read", &a->reads[i]);
                break;
            }
        }
    }
    if (mode & DEV_WRITE) {
        a->has_write = 1;
        rec_set(&a->write, slot, tick, stream, op);
        a->n_reads = 0;
        return;
    }
    for (int i = 0; i < a->n_reads; i++) {
        if (a->reads[i].slot == slot) {
            rec_set(&a->reads[i], slot, tick, stream, op);
            return;
        }
    }
    if (a->n_reads == a->cap_reads) {
        int cap = a->cap_reads ? a->cap_reads * 2 : 4;
        cpu_acc_rec *n = realloc(a->reads, (size_t)cap * sizeof *n);
        if (!n)
            return; /* out of memory: forget this read (the checker may miss a race, never invents one) */
        a->reads = n;
        a->cap_reads = cap;
    }
    rec_set(&a->reads[a->n_reads++], slot, tick, stream, op);
}

void cpu_race_enable(dev_platform *bp, int on)
{
    atomic_store(&cpu_plat(bp)->race_on, on ? 1 : 0);
}

uint64_t cpu_race_count(const dev_platform *bp)
{
    cpu_platform *p = cpu_plat((dev_platform *)bp);
    pthread_mutex_lock(&p->reg_lock);
    uint64_t n = p->race_count;
    pthread_mutex_unlock(&p->reg_lock);
    return n;
}

uint64_t cpu_race_first(const dev_platform *bp, char *buf, size_t len)
{
    cpu_platform *p = cpu_plat((dev_platform *)bp);
    pthread_mutex_lock(&p->reg_lock);
    uint64_t n = p->race_count;
    if (buf && len)
        snprintf(buf, len, "%s", n ? p->race_first : "");
    pthread_mutex_unlock(&p->reg_lock);
    return n;
}

void cpu_race_reset(dev_platform *bp)
{
    cpu_platform *p = cpu_plat(bp);
    pthread_mutex_lock(&p->reg_lock);
    p->race_count = 0;
    p->race_first[0] = '\0';
    pthread_mutex_unlock(&p->reg_lock);
}
