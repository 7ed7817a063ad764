/* CPU backend: vector clocks and the stream-order race checker.
 *
 * Clocks. Slot 0 is the host; every live stream holds one slot. Enqueuing an op on stream s ticks s's slot
 * and gives the op clock = join(s's clock, host clock) (+ the bound record's clock for a wait). A record
 * snapshots its op's clock; host-synchronous calls (stream/event sync, a completed query, stream destroy)
 * join what they learned into the host clock. Clocks are computed at ENQUEUE, so they do not depend on
 * when workers run.
 * Checker. Each allocation keeps records of the accesses (byte range, read/write, slot, tick) not yet
 * superseded. An op checks at EXECUTION (under reg_lock) that it is ordered after every overlapping
 * conflicting record (either side writes): op.vc[slot] >= tick. For two unordered accesses X, Y whichever runs second sees the first in the state and is flagged,
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
    free(a->recs);
    a->recs = NULL;
    a->n_recs = a->cap_recs = 0;
}

static int ordered(const cpu_acc_rec *r, uint32_t slot, const cpu_vc *vc)
{
    if (r->slot == slot)
        return 1; /* same stream (or the host): program order */
    uint64_t t = r->slot < vc->n ? vc->t[r->slot] : 0;
    return t >= r->tick;
}

static void report__(cpu_platform *p, cpu_alloc *a, size_t off, size_t end, int write, const char *stream,
                     const char *op, const cpu_acc_rec *prev)
{
    p->race_count++;
    if (p->race_count == 1)
        snprintf(p->race_first, sizeof p->race_first,
                 "race: %s op '%s' %s buf %p (%s, %zu B) bytes [%zu, %zu) last %s by %s op '%s' at op %llu, "
                 "no event orders it", stream, op, write ? "wrote" : "read", (void *)a->base,
                 a->owner->base.name, a->size, off, end, prev->write ? "written" : "read", prev->stream, prev->op,
                 (unsigned long long)prev->tick);
}

/* Too many live records (a buffer touched piecewise, e.g. one KV row per step): merge the records of each
 * (slot, kind) into one spanning record with the newest tick. Conservative: may report an access that is
 * ordered after an older piece but not the newest one; never misses a race. */
static void compact__(cpu_alloc *a)
{
    int n = 0;
    for (int i = 0; i < a->n_recs; i++) {
        cpu_acc_rec *r = &a->recs[i];
        int j = 0;
        while (j < n && !(a->recs[j].slot == r->slot && a->recs[j].write == r->write))
            j++;
        if (j == n) {
            a->recs[n++] = *r;
            continue;
        }
        cpu_acc_rec *m = &a->recs[j];
        if (r->off < m->off)
            m->off = r->off;
        if (r->end > m->end)
            m->end = r->end;
        if (r->tick > m->tick) {
            m->tick = r->tick;
            memcpy(m->op, r->op, sizeof m->op);
        }
    }
    a->n_recs = n;
}

void cpu_race_access__(cpu_platform *p, cpu_alloc *a, const void *ptr, size_t bytes, int mode, uint32_t slot,
                       const cpu_vc *vc, const char *stream, const char *op)
{
    if (bytes == 0)
        return;
    size_t off = (uintptr_t)ptr - a->base, end = off + bytes;
    int w = (mode & DEV_WRITE) != 0;
    uint64_t tick = slot < vc->n ? vc->t[slot] : 0;
    /* check: a conflicting (either side writes), overlapping, unordered earlier access is a race */
    for (int i = 0; i < a->n_recs; i++) {
        const cpu_acc_rec *r = &a->recs[i];
        if (r->off < end && off < r->end && (r->write || w) && !ordered(r, slot, vc)) {
            report__(p, a, off, end, w, stream, op, r);
            break;
        }
    }
    /* prune what this access supersedes inside its range: a write ordered after earlier accesses stands
     * for them (whatever is ordered after it is ordered after them); a read replaces this stream's reads */
    int n = 0;
    for (int i = 0; i < a->n_recs; i++) {
        const cpu_acc_rec *r = &a->recs[i];
        int covered = r->off >= off && r->end <= end;
        int drop = covered && (w ? ordered(r, slot, vc) : (!r->write && r->slot == slot));
        if (!drop)
            a->recs[n++] = *r;
    }
    a->n_recs = n;
    if (a->n_recs >= CPU_RECS_MAX)
        compact__(a);
    if (a->n_recs == a->cap_recs) {
        int cap = a->cap_recs ? a->cap_recs * 2 : 4;
        cpu_acc_rec *nr = realloc(a->recs, (size_t)cap * sizeof *nr);
        if (!nr)
            return; /* out of memory: forget this access (may miss a race, never invents one) */
        a->recs = nr;
        a->cap_recs = cap;
    }
    cpu_acc_rec *r = &a->recs[a->n_recs++];
    r->off = off;
    r->end = end;
    r->write = w;
    r->slot = slot;
    r->tick = tick;
    cpu_name_copy(r->stream, sizeof r->stream, stream);
    cpu_name_copy(r->op, sizeof r->op, op);
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
