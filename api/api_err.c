/* Version, status names and the last-error plumbing of the API. Shared state: each thread's last error
 * (thread-local) and each handle's errbox (its own mutex). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"

static _Thread_local int tl_code;
static _Thread_local char tl_msg[MEMRA_ERR_MAX];
static _Thread_local char tl_copy[MEMRA_ERR_MAX]; /* what *_last_error(handle) returns */

const char *memra_version(void)
{
    return MEMRA_VERSION_STRING;
}

const char *memra_last_error(void)
{
    return tl_msg;
}

int memra_last_status(void)
{
    return tl_code;
}

void api_errbox_init(api_errbox *b)
{
    pthread_mutex_init(&b->mu, NULL);
    b->code = MEMRA_OK;
    b->msg[0] = '\0';
}

void api_errbox_destroy(api_errbox *b)
{
    pthread_mutex_destroy(&b->mu);
}

static int record(api_errbox *box, int code, const char *msg)
{
    tl_code = code;
    snprintf(tl_msg, sizeof tl_msg, "%s: %s", memra_status_str(code), msg);
    if (box) {
        pthread_mutex_lock(&box->mu);
        box->code = code;
        memcpy(box->msg, tl_msg, sizeof box->msg);
        pthread_mutex_unlock(&box->mu);
    }
    return code;
}

int api_fail_err(api_errbox *box, const dev_err *err)
{
    int code = err->code ? err->code : MEMRA_E_INVAL;
    return record(box, code, err->msg[0] ? err->msg : "(no detail)");
}

int api_fail(api_errbox *box, int code, const char *fmt, ...)
{
    char msg[MEMRA_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return record(box, code, msg);
}

const char *api_errbox_read(api_errbox *box)
{
    pthread_mutex_lock(&box->mu);
    memcpy(tl_copy, box->msg, sizeof tl_copy);
    pthread_mutex_unlock(&box->mu);
    return tl_copy;
}

uint64_t api_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
