/*
 * sink_rows — what the ClickHouse sink reads from a session file and how it
 * encodes it: rows of schema/clickhouse.sql in ClickHouse's RowBinary format
 * (little-endian numbers, strings as a LEB128 length and bytes, Nullable as
 * a 0/1 byte before the value, arrays as a LEB128 count then the items).
 *
 * A reader opens its own read-only connection to the file (one per thread:
 * the writer's are never shared) with the `entries` virtual table registered
 * (vtab.h), so it reads what the writer has committed, in either storage
 * format, exactly as the exports do. Each read is one short read
 * transaction, so that the checkpointer is not held back. Sink thread only.
 */
#ifndef TRACECTLD_SINK_ROWS_H
#define TRACECTLD_SINK_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#define SINK_DAY_NS 86400000000000ull /* the partition of schema/clickhouse.sql */

/* A growing byte buffer; a failed append sets oom and leaves the contents alone. */
struct sink_buf {
    char *data;
    size_t len, cap;
    bool oom;
};

void sink_buf_u8(struct sink_buf *b, uint8_t v);
void sink_buf_u32(struct sink_buf *b, uint32_t v);
void sink_buf_u64(struct sink_buf *b, uint64_t v);
void sink_buf_str(struct sink_buf *b, const char *s, size_t n);   /* s may be NULL when n is 0 */
void sink_buf_leb(struct sink_buf *b, uint64_t v);                /* LEB128 */
void sink_buf_bytes(struct sink_buf *b, const void *p, size_t n); /* as they are */
void sink_buf_free(struct sink_buf *b);

/* Who the rows are of: every row carries them. */
struct sink_origin {
    const char *host; /* the daemon's host name */
    int64_t session_id;
    const char *session; /* the session's name */
    int64_t offset;      /* added to each start_ns: the wall clock (sink.h) */
};

/*
 * What entries refer to by id, read into memory as the ids appear (ids are
 * handed out in order, so each load reads those past the last one loaded):
 * op names and categories, device names, the ranks of processes (-1: none),
 * the elements of shapes. A lookup per entry instead of four joins.
 */
struct sink_names {
    char **name, **category; /* by id; NULL: none */
    int64_t *num;            /* by id: a rank, or elements */
    size_t n;                /* ids 0 .. n - 1 loaded */
};

struct sink_reader {
    sqlite3 *db;
    sqlite3_stmt *rows;
    bool blocks; /* the file is in the blocks format */
    struct sink_names ops, devices, procs, shapes;
};

/* Opens path read-only. 0, -ENOENT (no such file, or its schema is not there yet) or -EIO. */
int sink_rows_open(struct sink_reader *r, const char *path);
/* NULL db is a no-op. */
void sink_rows_close(struct sink_reader *r);

/*
 * Encodes up to max entries with a rowid above `after`, in rowid order, that
 * start on the UTC day of the first of them (a batch never spans two
 * partitions, so that its INSERT is one part: all or nothing), into out,
 * each with batch = the rowid of the batch's last entry. Sets *n and *last
 * (the last rowid encoded; `after` when none). 0, -EIO or -ENOMEM.
 */
int sink_rows_read(struct sink_reader *r, const struct sink_origin *o, int64_t after, size_t max,
                   struct sink_buf *out, size_t *n, int64_t *last);

/*
 * The start_ns of the first entry after rowid `after`, as stored (the
 * producer's clock): 0 with *start set, -ENOENT (none yet), -EIO.
 */
int sink_rows_next_start(struct sink_reader *r, int64_t after, int64_t *start);
/* start_ns + offset (the wall clock), at least 0. */
uint64_t sink_rows_wall(int64_t start_ns, int64_t offset);
/* The last committed rowid (0: none). 0 or -EIO. */
int sink_rows_last(struct sink_reader *r, int64_t *last);

/*
 * The processes rows of the session (schema/clickhouse.sql), with version,
 * into out; the distinct hosts its processes named, into hosts (a RowBinary
 * Array(String)). 0, -EIO or -ENOMEM.
 */
int sink_rows_processes(struct sink_reader *r, const struct sink_origin *o, uint64_t version,
                        struct sink_buf *out, struct sink_buf *hosts);

/*
 * The ranks rows of the session (schema/clickhouse.sql): its rank aggregates
 * summed per process, with version, into out; none for a file without them.
 * 0, -EIO or -ENOMEM.
 */
int sink_rows_ranks(struct sink_reader *r, const struct sink_origin *o, uint64_t version,
                    struct sink_buf *out);

#endif
