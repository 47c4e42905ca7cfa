/* sink_http.c — see sink_http.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "sink_http.h"

struct sink_http {
    CURL *curl;
    char *url;
    char *userpwd;
    atomic_bool *cancel;
    char *reply; /* the reply being read */
    size_t len, cap;
    bool too_big;
};

static size_t sink_http_write_cb(char *data, size_t size, size_t n, void *arg)
{
    struct sink_http *h = arg;
    size_t add = size * n;
    char *p;

    if (h->len + add + 1 > SINK_HTTP_MAX_REPLY) {
        h->too_big = true;
        return 0; /* ends the transfer */
    }
    if (h->len + add + 1 > h->cap) {
        size_t cap = (h->len + add + 1) * 2;

        if ((p = realloc(h->reply, cap)) == NULL)
            return 0;
        h->reply = p;
        h->cap = cap;
    }
    memcpy(h->reply + h->len, data, add);
    h->len += add;
    h->reply[h->len] = '\0';
    return add;
}

static int sink_http_progress_cb(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                                 curl_off_t un)
{
    struct sink_http *h = arg;

    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load(h->cancel) ? 1 : 0;
}

struct sink_http *sink_http_new(const char *url, const char *userpwd, atomic_bool *cancel)
{
    struct sink_http *h = calloc(1, sizeof(*h));

    if (h == NULL)
        return NULL;
    h->cancel = cancel;
    h->curl = curl_easy_init();
    h->url = strdup(url);
    h->userpwd = userpwd != NULL ? strdup(userpwd) : NULL;
    if (h->curl == NULL || h->url == NULL || (userpwd != NULL && h->userpwd == NULL)) {
        sink_http_free(h);
        return NULL;
    }
    return h;
}

void sink_http_free(struct sink_http *h)
{
    if (h == NULL)
        return;
    if (h->curl != NULL)
        curl_easy_cleanup(h->curl);
    if (h->userpwd != NULL) /* a password: not left in freed memory */
        memset(h->userpwd, 0, strlen(h->userpwd));
    free(h->userpwd);
    free(h->url);
    free(h->reply);
    free(h);
}

/* url?query=...&query_id=... into a malloc'd string, or NULL. */
static char *sink_http_url(struct sink_http *h, const char *query, const char *query_id)
{
    char *q = query != NULL ? curl_easy_escape(h->curl, query, 0) : NULL;
    char *id = query_id != NULL ? curl_easy_escape(h->curl, query_id, 0) : NULL;
    size_t len = strlen(h->url) + (q ? strlen(q) : 0) + (id ? strlen(id) : 0) + 64;
    char *url = malloc(len);
    const char *sep = strchr(h->url, '?') != NULL ? "&" : "?";

    if (url != NULL) {
        /* the status only once the query has ended: never 200 and an error after it */
        snprintf(url, len, "%s%swait_end_of_query=1", h->url, sep);
        sep = "&";
        if (q != NULL) {
            strcat(url, sep);
            strcat(url, "query=");
            strcat(url, q);
            sep = "&";
        }
        if (id != NULL) {
            strcat(url, sep);
            strcat(url, "query_id=");
            strcat(url, id);
        }
    }
    curl_free(q);
    curl_free(id);
    return url;
}

/* The server's message: its first line, into err. */
static void sink_http_server_error(struct sink_http *h, long status, char *err, size_t errlen)
{
    const char *msg = h->reply != NULL ? h->reply : "";
    size_t n = strcspn(msg, "\n");

    snprintf(err, errlen, "ClickHouse answered HTTP %ld: %.*s", status, (int)n, msg);
}

int sink_http_post(struct sink_http *h, const char *query, const char *query_id, const void *body,
                   size_t len, char **out, char *err, size_t errlen)
{
    char *url = sink_http_url(h, query, query_id);
    CURLcode rc;
    long status = 0;

    if (url == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    h->len = 0;
    h->too_big = false;
    if (h->reply != NULL)
        h->reply[0] = '\0';
    curl_easy_reset(h->curl); /* keeps the connection */
    curl_easy_setopt(h->curl, CURLOPT_URL, url);
    curl_easy_setopt(h->curl, CURLOPT_POST, 1L);
    curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, sink_http_write_cb);
    curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(h->curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h->curl, CURLOPT_XFERINFOFUNCTION, sink_http_progress_cb);
    curl_easy_setopt(h->curl, CURLOPT_XFERINFODATA, h);
    curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT, (long)SINK_HTTP_CONNECT_S);
    curl_easy_setopt(h->curl, CURLOPT_TIMEOUT, (long)SINK_HTTP_TOTAL_S);
    curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L); /* a thread of a daemon */
    curl_easy_setopt(h->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (h->userpwd != NULL) {
        curl_easy_setopt(h->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h->curl, CURLOPT_USERPWD, h->userpwd);
    }
    rc = curl_easy_perform(h->curl);
    free(url);
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "%s", h->too_big ? "reply too large" : curl_easy_strerror(rc));
        return -EIO;
    }
    curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        sink_http_server_error(h, status, err, errlen);
        return -EPROTO;
    }
    if (out != NULL) {
        *out = strdup(h->reply != NULL ? h->reply : "");
        if (*out == NULL) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    }
    return 0;
}
