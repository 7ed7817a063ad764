/* The shared-memory stand-in for an NCCL pair (bnd_shm.h; a test hook). Shared state: the file's header counters,
 * sent[k] (the producer's stream worker adds 1 after writing slot k) and recvd[k] (the consumer's stream worker
 * adds 1 after reading it), and aborted: atomics in memory both processes map; bnd_shm.aborted: any thread sets,
 * the stream workers read (an atomic). The slot bytes are ordered by the counters (release after the copy,
 * acquire before it). */
#include "transport/bnd_shm.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAX_SLOTS 16
#define SHM_MAGIC 0x6d656d73u
static const char SHM_TAG[8] = {'m', 'e', 'm', 'r', 'a', 'E', 'M', 'U'};

typedef struct shm_hdr {
    uint32_t magic;
    int32_t n_slots;
    uint64_t slot_bytes;
    _Atomic uint64_t sent[SHM_MAX_SLOTS];  /* sends of slot k whose bytes are in the file */
    _Atomic uint64_t recvd[SHM_MAX_SLOTS]; /* receives of slot k that copied them out */
    _Atomic int aborted;                   /* either side aborted: every wait returns */
} shm_hdr;

#define SHM_DATA 4096 /* the slots start here (the header fits below) */
_Static_assert(sizeof(shm_hdr) <= SHM_DATA, "the header fits in front of the slots");

struct bnd_shm {
    shm_hdr *h;
    size_t map_bytes;
    char path[BND_NCCL_ID_BYTES];
    int producer;
    atomic_int aborted;
};

typedef struct shm_op {
    bnd_shm *s;
    int k;
    void *p;
    size_t bytes;
} shm_op;

int bnd_shm_wanted(void)
{
    const char *v = getenv("MEMRA_TEST_NCCL_EMU");
    return v && !strcmp(v, "1");
}

int bnd_shm_is_id(const uint8_t *id) { return memcmp(id, SHM_TAG, sizeof SHM_TAG) == 0; }

int bnd_shm_make_id(uint8_t id[BND_NCCL_ID_BYTES], int n_slots, size_t slot_bytes, dev_err *err)
{
    static atomic_uint seq;
    if (n_slots < 1 || n_slots > SHM_MAX_SLOTS || slot_bytes == 0)
        return dev_err_set(err, MEMRA_E_INVAL, "NCCL stand-in: %d slots of %zu bytes", n_slots, slot_bytes);
    char path[BND_NCCL_ID_BYTES - sizeof SHM_TAG];
    snprintf(path, sizeof path, "%s/memra-nccl-emu-%d-%u", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid(), atomic_fetch_add(&seq, 1));
    const size_t bytes = SHM_DATA + (size_t)n_slots * slot_bytes;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        if (fd >= 0)
            close(fd), unlink(path);
        return dev_err_set(err, MEMRA_E_IO, "NCCL stand-in: cannot make %s", path);
    }
    shm_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = SHM_MAGIC;
    h.n_slots = n_slots;
    h.slot_bytes = slot_bytes;
    const int ok = pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h; /* zero counters: the file starts zeroed */
    close(fd);
    if (!ok) {
        unlink(path);
        return dev_err_set(err, MEMRA_E_IO, "NCCL stand-in: cannot write %s", path);
    }
    memset(id, 0, BND_NCCL_ID_BYTES);
    memcpy(id, SHM_TAG, sizeof SHM_TAG);
    memcpy(id + sizeof SHM_TAG, path, strlen(path) + 1);
    return 0;
}

bnd_shm *bnd_shm_open(const uint8_t *id, int producer, dev_err *err)
{
    bnd_shm *s = calloc(1, sizeof *s);
    if (!s) {
        dev_err_set(err, MEMRA_E_NOMEM, "NCCL stand-in: out of host memory");
        return NULL;
    }
    memcpy(s->path, id + sizeof SHM_TAG, sizeof s->path - sizeof SHM_TAG);
    s->path[sizeof s->path - 1] = 0;
    s->producer = producer;
    int fd = open(s->path, O_RDWR);
    shm_hdr h;
    if (fd < 0 || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != SHM_MAGIC) {
        if (fd >= 0)
            close(fd);
        dev_err_set(err, MEMRA_E_IO, "NCCL stand-in: cannot open %s", s->path);
        free(s);
        return NULL;
    }
    s->map_bytes = SHM_DATA + (size_t)h.n_slots * h.slot_bytes;
    void *m = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        dev_err_set(err, MEMRA_E_IO, "NCCL stand-in: cannot map %s", s->path);
        free(s);
        return NULL;
    }
    s->h = m;
    return s;
}

void bnd_shm_close(bnd_shm *s)
{
    if (!s)
        return;
    munmap(s->h, s->map_bytes);
    if (s->producer) /* its name lives as long as the producer's half: the consumer may map it any time before */
        unlink(s->path);
    free(s);
}

void bnd_shm_abort(bnd_shm *s)
{
    if (!s)
        return;
    atomic_store(&s->aborted, 1);
    atomic_store(&s->h->aborted, 1);
}

/* Wait (on a stream worker) until sent[k] - recvd[k] == ahead (0: the slot is free; 1: a send waits in it), or an
 * abort. 1 when reached. */
static int wait_slot(bnd_shm *s, int k, uint64_t ahead)
{
    shm_hdr *h = s->h;
    for (;;) {
        const uint64_t r = atomic_load_explicit(&h->recvd[k], memory_order_acquire);
        if (atomic_load_explicit(&h->sent[k], memory_order_acquire) - r == ahead)
            return 1;
        if (atomic_load(&s->aborted) || atomic_load(&h->aborted))
            return 0;
        struct timespec nap = {0, 20000};
        nanosleep(&nap, NULL);
    }
}

static void op_send(void *args)
{
    shm_op o;
    memcpy(&o, args, sizeof o);
    shm_hdr *h = o.s->h;
    /* ordered by recvd[k]: the receive of this slot's previous send copied it out (a blocking send's wait) */
    if (!wait_slot(o.s, o.k, 0))
        return;
    memcpy((char *)h + SHM_DATA + (size_t)o.k * h->slot_bytes, o.p, o.bytes);
    atomic_fetch_add_explicit(&h->sent[o.k], 1, memory_order_release);
}

static void op_recv(void *args)
{
    shm_op o;
    memcpy(&o, args, sizeof o);
    shm_hdr *h = o.s->h;
    /* ordered by sent[k]: the matching send's bytes are in the slot */
    if (!wait_slot(o.s, o.k, 1))
        return;
    memcpy(o.p, (const char *)h + SHM_DATA + (size_t)o.k * h->slot_bytes, o.bytes);
    atomic_fetch_add_explicit(&h->recvd[o.k], 1, memory_order_release);
}

static int enqueue(bnd_shm *s, int k, dev_stream *st, void *p, size_t bytes, int recv)
{
    if (atomic_load(&s->aborted))
        return MEMRA_E_STATE;
    if (k < 0 || k >= s->h->n_slots || bytes > s->h->slot_bytes)
        return MEMRA_E_INVAL;
    shm_op o = {s, k, p, bytes};
    dev_access acc = {p, bytes, recv ? DEV_WRITE : DEV_READ};
    return dev_launch_cpu_async(st, recv ? "nccl_stand_in_recv" : "nccl_stand_in_send", recv ? op_recv : op_send, &o,
                                sizeof o, &acc, 1);
}

int bnd_shm_send_async(bnd_shm *s, int k, dev_stream *st, const void *src, size_t bytes)
{
    return enqueue(s, k, st, (void *)src, bytes, 0);
}

int bnd_shm_recv_async(bnd_shm *s, int k, dev_stream *st, void *dst, size_t bytes)
{
    return enqueue(s, k, st, dst, bytes, 1);
}
