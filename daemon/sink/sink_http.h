/*
 * sink_http — the ClickHouse sink's HTTP client (libcurl): one keep-alive
 * connection to the server's HTTP interface, used by the sink's thread only.
 *
 * A request is a POST: the query in the URL (`?query=...`, with a query_id
 * when given) and data in the body, or the query alone in the body. The
 * server answers 200 with the result, or an error status with its message
 * ("Code: 60, e.displayText() = ..."), of which the first line is kept. Every
 * request asks wait_end_of_query=1: without it a query that fails after its
 * first rows were sent answers 200 with the error in the body.
 *
 * TIMEOUTS: SINK_HTTP_CONNECT_S to connect, SINK_HTTP_TOTAL_S for a whole
 * request; a transfer also ends when *cancel becomes true (the daemon stops).
 */
#ifndef TRACECTLD_SINK_HTTP_H
#define TRACECTLD_SINK_HTTP_H

#include <stdatomic.h>
#include <stddef.h>

#define SINK_HTTP_CONNECT_S 5
#define SINK_HTTP_TOTAL_S   60
#define SINK_HTTP_MAX_REPLY (16u << 20) /* a reply past this is an error */

struct sink_http;

/*
 * A client of url (http://host:port/), authenticating as userpwd ("user:password";
 * NULL: none), ending transfers when *cancel is set. NULL when out of memory.
 */
struct sink_http *sink_http_new(const char *url, const char *userpwd, atomic_bool *cancel);
/* NULL is a no-op. */
void sink_http_free(struct sink_http *h);

/*
 * POSTs body (len bytes) with query in the URL (NULL: the body is the
 * query) and query_id (NULL: none). On 200 returns 0 with the reply in *out
 * (NUL-terminated, caller must free; out may be NULL to discard it). Returns
 * -EIO for a transport failure (the server down, a timeout, cancelled),
 * -EPROTO when the server answered an error, -ENOMEM; err then says why.
 * After -EIO an INSERT may or may not have been applied.
 */
int sink_http_post(struct sink_http *h, const char *query, const char *query_id, const void *body,
                   size_t len, char **out, char *err, size_t errlen);

#endif
