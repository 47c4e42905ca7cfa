/*
 * peerlink.c — TLS 1.3 with an external PSK over uv_tcp through memory BIOs
 * (peerlink.h says why); the msgpack framing of peer messages.
 */
#include "peerlink.h"
#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#define PEERLINK_IDENTITY     "tracectl-peer"
#define PEERLINK_CIPHER       "TLS_AES_128_GCM_SHA256"
#define PEERLINK_HANDSHAKE_MS 5000 /* connect + handshake, or the link is closed */
#define PEERLINK_READ_CHUNK   16384

static const unsigned char peerlink_cipher_id[2] = {0x13, 0x01}; /* TLS_AES_128_GCM_SHA256 */

/* ---- key ------------------------------------------------------------------ */

int peerlink_key_load(const char *path, uint8_t psk[PEERLINK_PSK_LEN], char *err, size_t errlen)
{
    char buf[PEERLINK_KEY_MAX + 1];
    struct stat st;
    ssize_t n;
    size_t len;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 0;

    if (fd < 0) {
        snprintf(err, errlen, "--peer-key %s: %s", path, strerror(errno));
        return -errno;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "--peer-key %s: not a regular file", path);
        rc = -EINVAL;
        goto out;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(err, errlen, "--peer-key %s: mode %04o lets others read it; it must be 0600", path,
                 (unsigned)(st.st_mode & 07777));
        rc = -EPERM;
        goto out;
    }
    n = read(fd, buf, sizeof(buf));
    if (n < 0) {
        snprintf(err, errlen, "--peer-key %s: %s", path, strerror(errno));
        rc = -EIO;
        goto out;
    }
    len = (size_t)n;
    while (len > 0 && isspace((unsigned char)buf[len - 1]))
        len--;
    if (n > PEERLINK_KEY_MAX || len < PEERLINK_KEY_MIN) {
        snprintf(err, errlen,
                 "--peer-key %s: a key holds %d to %d bytes (e.g. openssl rand -hex 32)", path,
                 PEERLINK_KEY_MIN, PEERLINK_KEY_MAX);
        rc = -EINVAL;
        goto out;
    }
    if (EVP_Digest(buf, len, psk, NULL, EVP_sha256(), NULL) != 1) {
        snprintf(err, errlen, "--peer-key %s: cannot hash the key", path);
        rc = -EIO;
    }
out:
    OPENSSL_cleanse(buf, sizeof(buf));
    close(fd);
    return rc;
}

/* ---- TLS context: the PSK callbacks ---------------------------------------- */

/* The PSK as a TLS 1.3 session: what both callbacks give OpenSSL. NULL on failure. */
static SSL_SESSION *peerlink_psk_session(SSL *ssl)
{
    const uint8_t *psk = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, peerlink_cipher_id);
    SSL_SESSION *sess = SSL_SESSION_new();

    if (sess == NULL || cipher == NULL ||
        !SSL_SESSION_set1_master_key(sess, psk, PEERLINK_PSK_LEN) ||
        !SSL_SESSION_set_cipher(sess, cipher) ||
        !SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION)) {
        SSL_SESSION_free(sess);
        return NULL;
    }
    return sess;
}

static int peerlink_use_session_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id,
                                   size_t *idlen, SSL_SESSION **sess)
{
    /* md is the hash of a cipher already chosen (a HelloRetryRequest): ours is SHA-256. */
    if (md != NULL && EVP_MD_get_type(md) != NID_sha256) {
        *sess = NULL;
        return 1;
    }
    *sess = peerlink_psk_session(ssl);
    *id = (const unsigned char *)PEERLINK_IDENTITY;
    *idlen = strlen(PEERLINK_IDENTITY);
    return *sess != NULL;
}

static int peerlink_find_session_cb(SSL *ssl, const unsigned char *id, size_t idlen,
                                    SSL_SESSION **sess)
{
    *sess = NULL;
    if (idlen != strlen(PEERLINK_IDENTITY) || memcmp(id, PEERLINK_IDENTITY, idlen) != 0)
        return 1; /* not ours: no PSK, and without a certificate the handshake fails */
    *sess = peerlink_psk_session(ssl);
    return *sess != NULL;
}

struct ssl_ctx_st *peerlink_ctx_new(bool server, const uint8_t psk[PEERLINK_PSK_LEN])
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    uint8_t *key = malloc(PEERLINK_PSK_LEN);

    if (ctx == NULL || key == NULL || !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(ctx, PEERLINK_CIPHER)) {
        log_error("peer: cannot set up TLS: %s", ERR_error_string(ERR_get_error(), NULL));
        SSL_CTX_free(ctx);
        free(key);
        return NULL;
    }
    memcpy(key, psk, PEERLINK_PSK_LEN);
    SSL_CTX_set_app_data(ctx, key);
    SSL_CTX_set_num_tickets(ctx, 0); /* no resumption: every link proves the key again */
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    if (server)
        SSL_CTX_set_psk_find_session_callback(ctx, peerlink_find_session_cb);
    else
        SSL_CTX_set_psk_use_session_callback(ctx, peerlink_use_session_cb);
    return ctx;
}

void peerlink_ctx_free(struct ssl_ctx_st *ctx)
{
    uint8_t *key;

    if (ctx == NULL)
        return;
    key = SSL_CTX_get_app_data(ctx);
    if (key != NULL)
        OPENSSL_cleanse(key, PEERLINK_PSK_LEN);
    free(key);
    SSL_CTX_free(ctx);
}

/* ---- closing ------------------------------------------------------------------ */

static void peerlink_handle_closed_cb(uv_handle_t *h)
{
    struct peerlink *l = h->data;

    if (--l->handles > 0)
        return;
    SSL_free(l->ssl); /* frees both BIOs */
    l->ssl = NULL;
    peerframe_deinit(&l->frame);
    l->ops->on_close(l, l->reason);
}

void peerlink_close(struct peerlink *l, const char *reason)
{
    if (l->closing)
        return;
    l->closing = true;
    snprintf(l->reason, sizeof(l->reason), "%s", reason);
    uv_close((uv_handle_t *)&l->timer, peerlink_handle_closed_cb);
    uv_close((uv_handle_t *)&l->tcp, peerlink_handle_closed_cb);
}

/* The OpenSSL error queue in one line (and emptied). */
static const char *peerlink_ssl_error(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();

    if (e == 0)
        snprintf(buf, len, "the connection ended");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

/* ---- writing ------------------------------------------------------------------- */

struct peerlink_write {
    uv_write_t req;
    char data[];
};

static void peerlink_write_cb(uv_write_t *req, int status)
{
    struct peerlink *l = req->data;

    free(req);
    if (status < 0 && status != UV_ECANCELED)
        peerlink_close(l, uv_strerror(status));
}

/* Sends what TLS has for the network. 0 or a negative errno (the link is then closing). */
static int peerlink_flush(struct peerlink *l)
{
    size_t pending = (size_t)BIO_ctrl_pending(l->wbio);
    struct peerlink_write *w;
    uv_buf_t b;
    int rc;

    if (pending == 0 || l->closing)
        return 0;
    w = malloc(sizeof(*w) + pending);
    if (w == NULL) {
        peerlink_close(l, "out of memory");
        return -ENOMEM;
    }
    if (BIO_read(l->wbio, w->data, (int)pending) != (int)pending) {
        free(w);
        peerlink_close(l, "TLS output lost");
        return -EIO;
    }
    w->req.data = l;
    b = uv_buf_init(w->data, (unsigned)pending);
    rc = uv_write(&w->req, (uv_stream_t *)&l->tcp, &b, 1, peerlink_write_cb);
    if (rc < 0) {
        free(w);
        peerlink_close(l, uv_strerror(rc));
    }
    return rc;
}

int peerlink_send(struct peerlink *l, const char *buf, size_t len)
{
    char why[200], ssl_err[120];

    if (!l->ready || l->closing)
        return -ENOTCONN;
    if (len > PEERLINK_MAX_MSG || SSL_write(l->ssl, buf, (int)len) != (int)len) {
        snprintf(why, sizeof(why), "TLS write: %s", peerlink_ssl_error(ssl_err, sizeof(ssl_err)));
        peerlink_close(l, why);
        return -EIO;
    }
    return peerlink_flush(l);
}

void peerlink_raw(struct peerlink *l, size_t max)
{
    l->raw = true;
    l->frame.max = max;
}

bool peerlink_busy(const struct peerlink *l)
{
    return l->closing || l->tcp.write_queue_size > PEERLINK_MAX_QUEUE;
}

/* ---- reading ------------------------------------------------------------------- */

/* Takes plaintext bytes and hands every whole message in them to the owner. */
static int peerlink_plain(struct peerlink *l, const char *p, size_t n)
{
    const char *why = NULL;
    size_t len;
    int rc = 0;

    if (peerframe_push(&l->frame, p, n) < 0) {
        peerlink_close(l, "out of memory");
        return -ENOMEM;
    }
    l->rx_bytes += n;
    while (!l->closing && (rc = peerframe_next(&l->frame, &len, &why)) == 1) {
        msgpack_unpacked res;
        size_t off = 0;
        if (l->raw) {
            l->ops->on_raw(l, l->frame.buf, len);
            peerframe_take(&l->frame, len);
            continue;
        }
        msgpack_unpacked_init(&res);
        if (msgpack_unpack_next(&res, l->frame.buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != len)
            peerlink_close(l, "malformed msgpack");
        else if (res.data.type != MSGPACK_OBJECT_ARRAY || res.data.via.array.size == 0 ||
                 res.data.via.array.ptr[0].type != MSGPACK_OBJECT_STR)
            peerlink_close(l, "a message is not an array that starts with its type");
        else
            l->ops->on_msg(l, &res.data);
        msgpack_unpacked_destroy(&res);
        peerframe_take(&l->frame, len);
    }
    if (!l->closing && rc < 0)
        peerlink_close(l, why);
    return l->closing ? -EPROTO : 0;
}

/* Runs TLS over what arrived: the handshake, then every record there is. */
static void peerlink_pump(struct peerlink *l)
{
    char buf[PEERLINK_READ_CHUNK], why[200], ssl_err[120];
    int n, e;

    if (!l->ready) {
        n = SSL_do_handshake(l->ssl);
        if (n != 1) {
            e = SSL_get_error(l->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                peerlink_flush(l);
                return;
            }
            /* The alert for the peer (a wrong key: decrypt_error) goes out before the close. */
            peerlink_flush(l);
            peerlink_ssl_error(ssl_err, sizeof(ssl_err));
            /* A PSK that differs shows as a binder that does not verify (the server) or the
             * alert it sends back (the client): say what is most likely wrong. */
            snprintf(why, sizeof(why), "TLS handshake failed%s: %s",
                     strstr(ssl_err, "binder") != NULL || strstr(ssl_err, "illegal parameter")
                         ? " (a wrong --peer-key?)"
                         : "",
                     ssl_err);
            peerlink_close(l, why);
            return;
        }
        l->ready = true;
        uv_timer_stop(&l->timer);
        peerlink_flush(l);
        l->ops->on_ready(l);
    }
    while (!l->closing) {
        n = SSL_read(l->ssl, buf, sizeof(buf));
        if (n > 0) {
            if (peerlink_plain(l, buf, (size_t)n) < 0)
                return;
            continue;
        }
        e = SSL_get_error(l->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        snprintf(why, sizeof(why), "%s",
                 e == SSL_ERROR_ZERO_RETURN ? "closed by the peer"
                                            : peerlink_ssl_error(ssl_err, sizeof(ssl_err)));
        peerlink_close(l, why);
        return;
    }
    peerlink_flush(l);
}

static void peerlink_alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
    (void)h;
    buf->base = malloc(size);
    buf->len = buf->base != NULL ? size : 0;
}

static void peerlink_read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct peerlink *l = s->data;

    if (n > 0 && !l->closing) {
        l->rx_ns = uv_hrtime();
        l->rx_ms = uv_now(s->loop);
        if (BIO_write(l->rbio, buf->base, (int)n) != (int)n)
            peerlink_close(l, "out of memory");
        else
            peerlink_pump(l);
    } else if (n < 0) {
        peerlink_close(l, n == UV_EOF ? "closed by the peer" : uv_strerror((int)n));
    }
    free(buf->base);
}

static void peerlink_deadline_cb(uv_timer_t *t)
{
    peerlink_close(t->data, "no TLS handshake in time");
}

/* Sets up TLS and the handles; the handles are open whatever it returns. */
static int peerlink_init(struct peerlink *l, uv_loop_t *loop, SSL_CTX *ctx,
                         const struct peerlink_ops *ops, void *data)
{
    memset(l, 0, sizeof(*l));
    l->ops = ops;
    l->data = data;
    uv_tcp_init(loop, &l->tcp);
    uv_timer_init(loop, &l->timer);
    l->tcp.data = l->timer.data = l;
    l->handles = 2;
    l->rx_ms = uv_now(loop);
    snprintf(l->addr, sizeof(l->addr), "?");
    peerframe_init(&l->frame, PEERLINK_MAX_MSG);
    l->ssl = SSL_new(ctx);
    l->rbio = BIO_new(BIO_s_mem());
    l->wbio = BIO_new(BIO_s_mem());
    if (l->ssl == NULL || l->rbio == NULL || l->wbio == NULL) {
        BIO_free(l->rbio);
        BIO_free(l->wbio);
        return -ENOMEM;
    }
    SSL_set_bio(l->ssl, l->rbio, l->wbio);
    uv_timer_start(&l->timer, peerlink_deadline_cb, PEERLINK_HANDSHAKE_MS, 0);
    return 0;
}

static void peerlink_name(struct peerlink *l, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        uv_ip4_name(a, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        uv_ip6_name(a, host, sizeof(host));
        port = ntohs(a->sin6_port);
    }
    snprintf(l->addr, sizeof(l->addr), "%s:%d", host, port);
}

int peerlink_accept(struct peerlink *l, uv_loop_t *loop, struct ssl_ctx_st *ctx,
                    uv_stream_t *server, const struct peerlink_ops *ops, void *data)
{
    struct sockaddr_storage ss = {0};
    int len = sizeof(ss);
    int rc = peerlink_init(l, loop, ctx, ops, data);

    if (rc == 0)
        rc = uv_accept(server, (uv_stream_t *)&l->tcp);
    if (rc == 0 && uv_tcp_getpeername(&l->tcp, (struct sockaddr *)&ss, &len) == 0)
        peerlink_name(l, &ss);
    if (rc == 0) {
        uv_tcp_nodelay(&l->tcp, 1);
        SSL_set_accept_state(l->ssl);
        rc = uv_read_start((uv_stream_t *)&l->tcp, peerlink_alloc_cb, peerlink_read_cb);
    }
    if (rc < 0)
        peerlink_close(l, rc == -ENOMEM ? "out of memory" : uv_strerror(rc));
    return rc;
}

static void peerlink_connect_cb(uv_connect_t *req, int status)
{
    struct peerlink *l = req->data;

    free(req);
    if (l->closing)
        return;
    if (status < 0) {
        peerlink_close(l, uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&l->tcp, 1);
    status = uv_read_start((uv_stream_t *)&l->tcp, peerlink_alloc_cb, peerlink_read_cb);
    if (status < 0) {
        peerlink_close(l, uv_strerror(status));
        return;
    }
    SSL_set_connect_state(l->ssl);
    peerlink_pump(l); /* sends the ClientHello */
}

int peerlink_connect(struct peerlink *l, uv_loop_t *loop, struct ssl_ctx_st *ctx,
                     const struct sockaddr *addr, const struct peerlink_ops *ops, void *data)
{
    uv_connect_t *req;
    int rc = peerlink_init(l, loop, ctx, ops, data);

    peerlink_name(l, (const struct sockaddr_storage *)addr);
    req = rc == 0 ? malloc(sizeof(*req)) : NULL;
    if (rc == 0 && req == NULL)
        rc = -ENOMEM;
    if (rc == 0) {
        req->data = l;
        rc = uv_tcp_connect(req, &l->tcp, addr, peerlink_connect_cb);
        if (rc < 0)
            free(req);
    }
    if (rc < 0)
        peerlink_close(l, rc == -ENOMEM ? "out of memory" : uv_strerror(rc));
    return rc;
}

int peerlink_parse_addr(const char *s, struct sockaddr_storage *out)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon = strrchr(s, ':');
    char *end;
    unsigned long port;
    size_t hl;

    if (colon == NULL || colon == s)
        return -EINVAL;
    port = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || port == 0 || port > 65535)
        return -EINVAL;
    hl = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hl < 3 || s[hl - 1] != ']' || hl - 2 >= sizeof(host))
            return -EINVAL;
        memcpy(host, s + 1, hl - 2);
        host[hl - 2] = '\0';
        return uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)out) == 0 ? 0 : -EINVAL;
    }
    if (hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = '\0';
    return uv_ip4_addr(host, (int)port, (struct sockaddr_in *)out) == 0 ? 0 : -EINVAL;
}

bool peerlink_addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return false;
}
