/*
 * test_cli_export_dict — the ext map's MPI keys in an export row
 * (client/cli/cli_export_dict.c, which every export format reads rows
 * through): peer, tag, comm, seq and comm_size decoded when present, absent
 * when not, and a clear error for a value of the wrong type. Headers and
 * rows are packed here with msgpack-c, as PROTOCOL.md "export" lays them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <msgpack.h>

#include "cli_export_dict.h"

TestSuite(cli_export_dict);

static void pack_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* A header: session 1 "s", op 7 "MPI_Send" (comm), device 3 "cpu:0", process 5 rank 0. */
static void pack_header(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 4);
    pack_str(pk, "session");
    msgpack_pack_map(pk, 2);
    pack_str(pk, "id");
    msgpack_pack_int(pk, 1);
    pack_str(pk, "name");
    pack_str(pk, "s");
    pack_str(pk, "ops");
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 3);
    msgpack_pack_int(pk, 7);
    pack_str(pk, "MPI_Send");
    pack_str(pk, "comm");
    pack_str(pk, "devices");
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 3);
    pack_str(pk, "cpu:0");
    pack_str(pk, "processes");
    msgpack_pack_array(pk, 1);
    msgpack_pack_array(pk, 5);
    msgpack_pack_int(pk, 5);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 4242);
    pack_str(pk, "vm");
    msgpack_pack_nil(pk);
}

/* An ext value as the table gives it. */
enum kind { UINT, NEG, STR, FLOAT };
struct val {
    const char *key;
    enum kind kind;
    uint64_t u;
};

static void pack_row(msgpack_packer *pk, const struct val *ext, size_t n)
{
    msgpack_pack_array(pk, 11);
    msgpack_pack_int(pk, 5);   /* process */
    msgpack_pack_int(pk, 0);   /* step */
    msgpack_pack_int(pk, 7);   /* op */
    msgpack_pack_int(pk, 3);   /* device */
    msgpack_pack_int(pk, 100); /* start */
    msgpack_pack_int(pk, 10);  /* dur */
    msgpack_pack_int(pk, 4);   /* elements */
    msgpack_pack_int(pk, 16);  /* mem */
    msgpack_pack_nil(pk);      /* out_shape */
    msgpack_pack_nil(pk);      /* in_shapes */
    msgpack_pack_map(pk, n);
    for (size_t i = 0; i < n; i++) {
        pack_str(pk, ext[i].key);
        if (ext[i].kind == UINT)
            msgpack_pack_uint64(pk, ext[i].u);
        else if (ext[i].kind == NEG)
            msgpack_pack_int64(pk, -(int64_t)ext[i].u);
        else if (ext[i].kind == STR)
            pack_str(pk, "x");
        else
            msgpack_pack_double(pk, 1.5);
    }
}

struct decoded {
    int rc;
    char err[256];
    struct cli_export_row r;
};

/* Decodes one row with ext (n values) against the header above. */
static void decode(const struct val *ext, size_t n, struct decoded *out)
{
    msgpack_sbuffer hb, rb;
    msgpack_packer pk;
    msgpack_unpacked h, row;
    struct cli_export_dict d;
    char err[256] = "";

    msgpack_sbuffer_init(&hb);
    msgpack_sbuffer_init(&rb);
    msgpack_packer_init(&pk, &hb, msgpack_sbuffer_write);
    pack_header(&pk);
    msgpack_packer_init(&pk, &rb, msgpack_sbuffer_write);
    pack_row(&pk, ext, n);
    msgpack_unpacked_init(&h);
    msgpack_unpacked_init(&row);
    cr_assert_eq(msgpack_unpack_next(&h, hb.data, hb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(msgpack_unpack_next(&row, rb.data, rb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq(cli_export_dict_init(&d, &h.data, err, sizeof(err)), 0, "%s", err);
    memset(out, 0, sizeof(*out));
    out->rc = cli_export_row_decode(&d, &row.data, &out->r, out->err, sizeof(out->err));
    out->r.proc = NULL, out->r.op = NULL, out->r.dev = NULL; /* they point into d */
    out->r.out_shape = out->r.in_shapes = NULL;
    cli_export_dict_deinit(&d);
    msgpack_unpacked_destroy(&h);
    msgpack_unpacked_destroy(&row);
    msgpack_sbuffer_destroy(&hb);
    msgpack_sbuffer_destroy(&rb);
}

Test(cli_export_dict, mpi_keys_decoded)
{
    static const struct val ext[] = {{"peer", UINT, 3},          {"tag", NEG, 7},
                                     {"comm", UINT, UINT64_MAX}, {"seq", UINT, 0},
                                     {"comm_size", UINT, 4},     {"stream", UINT, 9}};
    struct decoded d;

    decode(ext, sizeof(ext) / sizeof(ext[0]), &d);
    cr_assert_eq(d.rc, 0, "%s", d.err);
    cr_assert(d.r.has_peer && d.r.peer == 3);
    cr_assert(d.r.has_tag && d.r.tag == -7);
    cr_assert(d.r.has_comm && d.r.comm == UINT64_MAX);
    cr_assert(d.r.has_seq && d.r.seq == 0);
    cr_assert(d.r.has_comm_size && d.r.comm_size == 4);
    cr_assert(d.r.has_stream && d.r.stream == 9);
}

Test(cli_export_dict, mpi_keys_absent)
{
    static const struct val ext[] = {{"stream", UINT, 1}};
    struct decoded d;

    decode(ext, 1, &d);
    cr_assert_eq(d.rc, 0, "%s", d.err);
    cr_assert(!d.r.has_peer && !d.r.has_tag && !d.r.has_comm && !d.r.has_seq && !d.r.has_comm_size);
}

/* A value of the wrong type: the row is refused, the message names the key. Arrays, not
 * pointers: Criterion may run each parameter in a new process image. */
struct bad {
    char key[16];
    enum kind kind;
    uint64_t u;
    char msg[48];
};

ParameterizedTestParameters(cli_export_dict, wrong_type)
{
    static struct bad t[] = {
        {"peer", STR, 0, "ext.peer is not a uint"},
        {"peer", NEG, 1, "ext.peer is not a uint"},
        {"comm", FLOAT, 0, "ext.comm is not a uint"},
        {"seq", NEG, 2, "ext.seq is not a uint"},
        {"comm_size", STR, 0, "ext.comm_size is not a uint"},
        {"tag", STR, 0, "ext.tag is not an int64"},
        {"tag", UINT, UINT64_MAX, "ext.tag is not an int64"}, /* past INT64_MAX */
        {"tag", FLOAT, 0, "ext.tag is not an int64"},
    };
    return cr_make_param_array(struct bad, t, sizeof(t) / sizeof(t[0]));
}

ParameterizedTest(struct bad *b, cli_export_dict, wrong_type)
{
    struct val v = {b->key, b->kind, b->u};
    struct decoded d;

    decode(&v, 1, &d);
    cr_assert_eq(d.rc, -EPROTO, "%s: rc %d", b->key, d.rc);
    cr_assert(strstr(d.err, b->msg) != NULL, "%s: '%s'", b->key, d.err);
}
