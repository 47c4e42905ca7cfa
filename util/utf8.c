/*
 * utf8 — a strict UTF-8 decoder (see utf8.h).
 */
#include "utf8.h"

/* Length of the sequence a lead byte announces, and the smallest code point it may encode. */
static size_t utf8_lead(unsigned char b, uint32_t *cp, uint32_t *min)
{
    if (b < 0x80) {
        *cp = b;
        *min = 0;
        return 1;
    }
    if ((b & 0xe0) == 0xc0) {
        *cp = b & 0x1f;
        *min = 0x80;
        return 2;
    }
    if ((b & 0xf0) == 0xe0) {
        *cp = b & 0x0f;
        *min = 0x800;
        return 3;
    }
    if ((b & 0xf8) == 0xf0) {
        *cp = b & 0x07;
        *min = 0x10000;
        return 4;
    }
    return 0; /* a continuation byte or 0xf8..0xff */
}

size_t utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c, min;
    size_t len = utf8_lead(u[0], &c, &min);

    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (u[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}
