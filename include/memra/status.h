/* memra status codes: 0 is success, every failure is negative. Leaf header (no includes), shared by the
 * public API and every internal layer so a code means the same thing everywhere. */
#ifndef MEMRA_STATUS_H
#define MEMRA_STATUS_H

typedef enum memra_status {
    MEMRA_OK = 0,
    MEMRA_E_INVAL = -1,       /* a bad argument, door value or config field (message names it) */
    MEMRA_E_NOMEM = -2,       /* host or device allocation failed */
    MEMRA_E_IO = -3,          /* a file could not be opened, mapped or read */
    MEMRA_E_FORMAT = -4,      /* a model file is corrupt, truncated or of an unsupported kind */
    MEMRA_E_UNSUPPORTED = -5, /* valid but not supported here (architecture, tensor type, backend) */
    MEMRA_E_DEVICE = -6,      /* a device, stream or kernel failed (CUDA error, CPU-backend fault) */
    MEMRA_E_ACCESS = -7,      /* a kernel touched another device's memory without a peer grant */
    MEMRA_E_RACE = -8,        /* the stream-order checker saw an access no event orders */
    MEMRA_E_REFUSED = -9,     /* a guard refused a path (e.g. unsplit walk over sharded cross-device weights) */
    MEMRA_E_STATE = -10,      /* called in the wrong state (closed sequence, stopped runtime, ...) */
    MEMRA_E_ABORTED = -11,    /* the abort callback asked to stop */
    MEMRA_E_FULL = -12,       /* no free sequence slot / context full */
} memra_status;

/* Visibility of the public API: the shared library is built with hidden visibility and MEMRA_BUILD_SHARED,
 * so only MEMRA_API symbols (all named memra_*) are exported from libmemra.so. */
#ifndef MEMRA_API
#if defined(MEMRA_BUILD_SHARED) && defined(__GNUC__)
#define MEMRA_API __attribute__((visibility("default")))
#else
#define MEMRA_API
#endif
#endif

/* Short static name of a status ("MEMRA_E_INVAL"); never NULL. Thread-safe. */
MEMRA_API const char *memra_status_str(int status);

#endif
