/*
 * peerframe.c — whole peer messages out of a byte stream (peerframe.h).
 */
#include "peerframe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void peerframe_init(struct peerframe *f, size_t max)
{
    memset(f, 0, sizeof(*f));
    f->max = max;
}

void peerframe_deinit(struct peerframe *f)
{
    free(f->buf);
    f->buf = NULL;
    f->len = f->cap = f->scanned = 0;
}

int peerframe_push(struct peerframe *f, const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (f->len + n > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        char *b;
        while (cap < f->len + n)
            cap *= 2;
        if ((b = realloc(f->buf, cap)) == NULL)
            return -ENOMEM;
        f->buf = b;
        f->cap = cap;
    }
    memcpy(f->buf + f->len, p, n);
    f->len += n;
    return 0;
}

int peerframe_next(struct peerframe *f, size_t *len, const char **why)
{
    static const struct proto_scan_stop whole = {.ready = true};

    if (f->scan.ready == 0 && f->len > f->scanned)
        f->scanned += proto_scan_bytes(&f->scan, (const uint8_t *)f->buf + f->scanned,
                                       f->len - f->scanned, f->max, &whole);
    if (f->scan.error != NULL) {
        *why = f->scan.message[0] ? f->scan.message : f->scan.error;
        return -EPROTO;
    }
    if (f->scan.ready == 0)
        return 0;
    *len = f->scanned; /* the scan stopped at the end of the first whole message */
    return 1;
}

void peerframe_take(struct peerframe *f, size_t len)
{
    memmove(f->buf, f->buf + len, f->len - len);
    f->len -= len;
    f->scanned -= len;
    f->scan.ready--;
}
