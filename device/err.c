#include "device/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *memra_status_str(int s)
{
    switch (s) {
    case MEMRA_OK: return "MEMRA_OK";
    case MEMRA_E_INVAL: return "MEMRA_E_INVAL";
    case MEMRA_E_NOMEM: return "MEMRA_E_NOMEM";
    case MEMRA_E_IO: return "MEMRA_E_IO";
    case MEMRA_E_FORMAT: return "MEMRA_E_FORMAT";
    case MEMRA_E_UNSUPPORTED: return "MEMRA_E_UNSUPPORTED";
    case MEMRA_E_DEVICE: return "MEMRA_E_DEVICE";
    case MEMRA_E_ACCESS: return "MEMRA_E_ACCESS";
    case MEMRA_E_RACE: return "MEMRA_E_RACE";
    case MEMRA_E_REFUSED: return "MEMRA_E_REFUSED";
    case MEMRA_E_STATE: return "MEMRA_E_STATE";
    case MEMRA_E_ABORTED: return "MEMRA_E_ABORTED";
    case MEMRA_E_FULL: return "MEMRA_E_FULL";
    default: return "MEMRA_E_UNKNOWN";
    }
}

int dev_err_set(dev_err *e, int code, const char *fmt, ...)
{
    if (!e || e->code != MEMRA_OK)
        return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

int dev_err_wrap(dev_err *e, const char *fmt, ...)
{
    if (!e)
        return MEMRA_E_INVAL;
    char head[DEV_ERR_MSG], tail[DEV_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(tail, e->msg, sizeof tail);
    int n = snprintf(e->msg, sizeof e->msg, "%.*s: ", (int)(sizeof head / 2), head);
    snprintf(e->msg + n, sizeof e->msg - (size_t)n, "%.*s", (int)(sizeof tail / 2), tail);
    return e->code;
}

void dev_err_clear(dev_err *e)
{
    if (e) {
        e->code = MEMRA_OK;
        e->msg[0] = '\0';
    }
}
