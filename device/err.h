/* Error detail carried out of every fallible internal call: a memra_status code and a message a user can
 * act on ("MEMRA_PP_SPLITS=20,10: cuts must be strictly increasing and inside (0, 30)"). */
#ifndef DEV_ERR_H
#define DEV_ERR_H

#include <stddef.h>
#include "memra/status.h"

#define DEV_ERR_MSG 512

typedef struct dev_err {
    int code;                 /* MEMRA_OK or a MEMRA_E_* value */
    char msg[DEV_ERR_MSG];    /* NUL-terminated detail; "" when code == MEMRA_OK */
} dev_err;

/* Fill e (when non-NULL) with code and a printf-style message; returns code so callers can
 * `return dev_err_set(err, MEMRA_E_INVAL, "...")`. Keeps the first error: a later call on an e that
 * already holds an error does nothing (the root cause wins). */
int dev_err_set(dev_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix e's message with "what: " (used when an error travels up a layer); returns e->code. */
int dev_err_wrap(dev_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset e to MEMRA_OK. */
void dev_err_clear(dev_err *e);

#endif
