/*
 * cli_pb — a minimal protocol-buffers writer (see cli_pb.h).
 */
#include "cli_pb.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CLI_PB_WIRE_VARINT 0
#define CLI_PB_WIRE_LEN    2

void cli_pb_init(struct cli_pb *pb)
{
    memset(pb, 0, sizeof(*pb));
}

void cli_pb_deinit(struct cli_pb *pb)
{
    free(pb->buf);
    cli_pb_init(pb);
}

void cli_pb_reset(struct cli_pb *pb)
{
    pb->len = 0;
    pb->err = 0;
}

int cli_pb_error(const struct cli_pb *pb)
{
    return pb->err;
}

/* Makes room for n more bytes. Returns false (and sets the error) when out of memory. */
static bool cli_pb_reserve(struct cli_pb *pb, size_t n)
{
    size_t cap = pb->cap ? pb->cap : 256;
    uint8_t *p;

    if (pb->err != 0)
        return false;
    if (pb->cap - pb->len >= n)
        return true;
    while (cap - pb->len < n)
        cap *= 2;
    p = realloc(pb->buf, cap);
    if (p == NULL) {
        pb->err = -ENOMEM;
        return false;
    }
    pb->buf = p;
    pb->cap = cap;
    return true;
}

static void cli_pb_varint(struct cli_pb *pb, uint64_t v)
{
    if (!cli_pb_reserve(pb, 10))
        return;
    while (v >= 0x80) {
        pb->buf[pb->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    pb->buf[pb->len++] = (uint8_t)v;
}

static void cli_pb_tag(struct cli_pb *pb, uint32_t field, unsigned wire)
{
    cli_pb_varint(pb, ((uint64_t)field << 3) | wire);
}

void cli_pb_uint(struct cli_pb *pb, uint32_t field, uint64_t v)
{
    cli_pb_tag(pb, field, CLI_PB_WIRE_VARINT);
    cli_pb_varint(pb, v);
}

void cli_pb_int(struct cli_pb *pb, uint32_t field, int64_t v)
{
    /* int32 and int64 are plain two's-complement varints (not zigzag, which is sint*). */
    cli_pb_uint(pb, field, (uint64_t)v);
}

void cli_pb_bytes(struct cli_pb *pb, uint32_t field, const void *s, size_t n)
{
    cli_pb_tag(pb, field, CLI_PB_WIRE_LEN);
    cli_pb_varint(pb, n);
    if (n > 0 && cli_pb_reserve(pb, n)) {
        memcpy(pb->buf + pb->len, s, n);
        pb->len += n;
    }
}

size_t cli_pb_begin(struct cli_pb *pb, uint32_t field)
{
    size_t token;

    cli_pb_tag(pb, field, CLI_PB_WIRE_LEN);
    if (!cli_pb_reserve(pb, CLI_PB_LEN_BYTES))
        return 0;
    token = pb->len;
    pb->len += CLI_PB_LEN_BYTES;
    return token;
}

void cli_pb_end(struct cli_pb *pb, size_t token)
{
    size_t n;

    if (pb->err != 0)
        return;
    n = pb->len - token - CLI_PB_LEN_BYTES;
    if (n >= CLI_PB_MAX_NEST) {
        pb->err = -EMSGSIZE;
        return;
    }
    /* A padded varint: every byte but the last carries the continuation bit. */
    for (size_t i = 0; i < CLI_PB_LEN_BYTES; i++) {
        uint8_t b = (uint8_t)((n >> (7 * i)) & 0x7f);

        pb->buf[token + i] = i + 1 < CLI_PB_LEN_BYTES ? (uint8_t)(b | 0x80) : b;
    }
}
