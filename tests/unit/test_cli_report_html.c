/*
 * test_cli_report_html — client/cli/cli_report_html.c, the page of `report
 * --html`: markup in the report's strings stays text (the verdict escaped,
 * op names and stacks unable to end their script element), the embedded
 * JSON reads back (yajl, independent of cli_json) to the report's figures,
 * and the page names no URL. Reports are built here with msgpack-c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <msgpack.h>
#include <yajl/yajl_tree.h>

#include "cli_report_html.h"

TestSuite(cli_report_html);

static void str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

#define HOSTILE "</script><script>alert(1)</script><img src=x>"

/* {"session": {...}, "verdict": V, "ops": [{"op": HOSTILE, "total_ns": 7}],
 *  "steps": [{"step": 3, "times_ns": [[0, 5], [1, 9]]}]} */
static char *page(const struct cli_report_flame *fl, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
    char *buf = NULL;
    FILE *f;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    str(&pk, "session");
    msgpack_pack_map(&pk, 2);
    str(&pk, "id");
    msgpack_pack_uint64(&pk, 12);
    str(&pk, "name");
    str(&pk, "job <b>&'\"");
    str(&pk, "verdict");
    str(&pk, "rank 1 <late> & slow");
    str(&pk, "ops");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    str(&pk, "op");
    str(&pk, HOSTILE);
    str(&pk, "total_ns");
    msgpack_pack_uint64(&pk, 7);
    str(&pk, "steps");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, 2);
    str(&pk, "step");
    msgpack_pack_uint64(&pk, 3);
    str(&pk, "times_ns");
    msgpack_pack_array(&pk, 2);
    for (int r = 0; r < 2; r++) {
        msgpack_pack_array(&pk, 2);
        msgpack_pack_int(&pk, r);
        msgpack_pack_uint64(&pk, r ? 9 : 5);
    }
    msgpack_unpacked_init(&res);
    cr_assert_eq(msgpack_unpack_next(&res, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    f = open_memstream(&buf, len);
    cr_assert_eq(cli_report_html_write(f, &res.data, fl), 0);
    fclose(f);
    msgpack_unpacked_destroy(&res);
    msgpack_sbuffer_destroy(&sb);
    return buf;
}

/* The text of <script type="application/json" id="id">, or NULL. */
static char *data(const char *html, const char *id)
{
    char open[128];
    const char *p, *e;

    snprintf(open, sizeof(open), "<script type=\"application/json\" id=\"%s\">", id);
    if ((p = strstr(html, open)) == NULL)
        return NULL;
    p += strlen(open);
    e = strstr(p, "</script>");
    cr_assert_not_null(e);
    return strndup(p, (size_t)(e - p));
}

Test(cli_report_html, markup_in_strings_stays_text)
{
    size_t len;
    char *html = page(NULL, &len);

    cr_assert_not_null(strstr(html, "<p>rank 1 &lt;late&gt; &amp; slow</p>"));
    cr_assert_not_null(strstr(html, "<title>tracectl report: job &lt;b&gt;&amp;&#39;&quot; (12)"));
    cr_assert_null(strstr(html, "alert(1)</script>"), "an op name ended its script element");
    cr_assert_null(strstr(html, "<img"));
    cr_assert_null(strcasestr(html, "http://"));
    cr_assert_null(strcasestr(html, "https://"));
    cr_assert_not_null(strstr(html, "<p id=\"flame-note\" hidden>not read</p>"));
    free(html);
}

Test(cli_report_html, embedded_report_reads_back)
{
    size_t len;
    char *html = page(NULL, &len), *json = data(html, "report"), err[128];
    yajl_val v = yajl_tree_parse(json, err, sizeof(err));
    const char *op_path[] = {"ops", NULL}, *steps_path[] = {"steps", NULL};
    yajl_val ops, steps, times;

    cr_assert_not_null(v, "%s: %s", err, json);
    ops = yajl_tree_get(v, op_path, yajl_t_array);
    cr_assert_str_eq(YAJL_GET_STRING(yajl_tree_get(ops->u.array.values[0],
                                                   (const char *[]){"op", NULL}, yajl_t_string)),
                     HOSTILE);
    steps = yajl_tree_get(v, steps_path, yajl_t_array);
    times =
        yajl_tree_get(steps->u.array.values[0], (const char *[]){"times_ns", NULL}, yajl_t_array);
    cr_assert_eq(YAJL_GET_INTEGER(times->u.array.values[1]->u.array.values[1]), 9);
    yajl_tree_free(v);
    free(json);
    free(html);
}

Test(cli_report_html, stacks_embedded_or_a_note)
{
    char time_lines[] = "job;gpu:0;" HOSTILE " 12\n";
    char mem_lines[] = "job;gpu:0;matmul 4096\n";
    struct cli_report_flame fl = {time_lines, mem_lines, sizeof(time_lines) - 1,
                                  sizeof(mem_lines) - 1, NULL};
    struct cli_report_flame none = {NULL, NULL, 0, 0, "none asked for"};
    size_t len;
    char *html = page(&fl, &len), *json = data(html, "stacks"), err[128];
    yajl_val v = yajl_tree_parse(json, err, sizeof(err));

    cr_assert_not_null(v, "%s", err);
    cr_assert_str_eq(
        YAJL_GET_STRING(yajl_tree_get(v, (const char *[]){"time", NULL}, yajl_t_string)),
        time_lines);
    cr_assert_str_eq(
        YAJL_GET_STRING(yajl_tree_get(v, (const char *[]){"memory", NULL}, yajl_t_string)),
        mem_lines);
    cr_assert_null(strstr(html, "alert(1)</script>"));
    yajl_tree_free(v);
    free(json);
    free(html);
    html = page(&none, &len);
    cr_assert_null(data(html, "stacks"));
    cr_assert_not_null(strstr(html, "<p id=\"flame-note\" hidden>none asked for</p>"));
    free(html);
}

Test(cli_report_html, not_a_map_is_refused)
{
    msgpack_object o = {.type = MSGPACK_OBJECT_NIL};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    cr_assert_eq(cli_report_html_write(f, &o, NULL), -EINVAL);
    fclose(f);
    cr_assert_eq(len, 0);
    free(buf);
}

/* The page of a report map packed by fill (which packs n keys at top level). */
static char *page_of(void (*fill)(msgpack_packer *), uint32_t n)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_unpacked res;
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n + 1);
    str(&pk, "verdict");
    str(&pk, "fine");
    fill(&pk);
    msgpack_unpacked_init(&res);
    cr_assert_eq(msgpack_unpack_next(&res, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    f = open_memstream(&buf, &len);
    cr_assert_eq(cli_report_html_write(f, &res.data, NULL), 0);
    fclose(f);
    msgpack_unpacked_destroy(&res);
    msgpack_sbuffer_destroy(&sb);
    return buf;
}

/* hosts: the home (own clock: 0, 0, 0.0) and a member 1.5 ms behind within 20 us, -3.25 ppm,
 * and one not measured yet (nil offset, bound, drift). */
static void fill_hosts(msgpack_packer *pk)
{
    static const char *names[] = {"home-a", "<gpu-b>", "gpu-c"};

    str(pk, "hosts");
    msgpack_pack_array(pk, 3);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_map(pk, 11);
        str(pk, "host");
        str(pk, names[i]);
        str(pk, "state");
        str(pk, i == 2 ? "stale" : "live");
        str(pk, "ranks");
        msgpack_pack_uint64(pk, 8);
        str(pk, "processes");
        msgpack_pack_uint64(pk, 8);
        str(pk, "entries");
        msgpack_pack_uint64(pk, 1234567890123ULL + (uint64_t)i);
        str(pk, "dropped");
        msgpack_pack_uint64(pk, (uint64_t)i * 7);
        str(pk, "snapshot_age_ns");
        msgpack_pack_uint64(pk, 250000000);
        str(pk, "offset_ns");
        if (i == 2)
            msgpack_pack_nil(pk);
        else
            msgpack_pack_int64(pk, i ? -1500000 : 0);
        str(pk, "bound_ns");
        if (i == 2)
            msgpack_pack_nil(pk);
        else
            msgpack_pack_uint64(pk, i ? 20000 : 0);
        str(pk, "drift_ppm");
        if (i == 2)
            msgpack_pack_nil(pk);
        else
            msgpack_pack_double(pk, i ? -3.25 : 0.0);
        str(pk, "violations");
        msgpack_pack_uint64(pk, 0);
    }
}

Test(cli_report_html, hosts_rows_as_a_table)
{
    char *html = page_of(fill_hosts, 1);
    const char *t = strstr(html, "<section id=\"hosts\">");

    cr_assert_not_null(t);
    cr_assert_not_null(strstr(t, "<td class=\"t\" data-v=\"home-a\">home-a</td>"));
    cr_assert_not_null(strstr(t, "<td class=\"t\" data-v=\"&lt;gpu-b&gt;\">&lt;gpu-b&gt;</td>"));
    cr_assert_null(strstr(html, "<gpu-b>"));
    /* exact figures in data-v, beyond a double's 2^53 too */
    cr_assert_not_null(strstr(t, "<td data-v=\"1234567890124\">"));
    cr_assert_not_null(strstr(t, "<td data-v=\"-1500000\">-1.50 ms</td>"));
    cr_assert_not_null(strstr(t, "<td data-v=\"20000\">20.0 µs</td>"));
    cr_assert_not_null(strstr(t, "<td data-v=\"-3.25\">-3.2 ppm</td>") ||
                       strstr(t, "<td data-v=\"-3.25\">-3.3 ppm</td>"));
    cr_assert_not_null(strstr(t, "<td data-v=\"0.0\">+0.0 ppm</td>"));
    /* not measured yet: empty data-v, "-" shown */
    cr_assert_not_null(strstr(t, "<td class=\"t\" data-v=\"stale\">stale</td><td data-v=\"8\">"));
    cr_assert_not_null(strstr(t, "<td data-v=\"\">-</td><td data-v=\"\">-</td><td data-v=\"\">-"));
    cr_assert_null(strstr(html, "<section id=\"mpi\">"));
    free(html);
}

/* hosts_late: rank 3 on m<1> caused 405.2 ms (± 330.5 us) in 20 of 20 steps; step 7 not named
 * (within the bound); and filter_hosts: home counted, m<1> and m2 left out. */
static void fill_late(msgpack_packer *pk)
{
    str(pk, "hosts_late");
    msgpack_pack_map(pk, 8);
    str(pk, "clock");
    str(pk, "home");
    str(pk, "instances");
    msgpack_pack_uint64(pk, 20);
    str(pk, "uncertain");
    msgpack_pack_uint64(pk, 1);
    str(pk, "steps_named");
    msgpack_pack_uint64(pk, 19);
    str(pk, "steps_within_bound");
    msgpack_pack_uint64(pk, 1);
    str(pk, "verdict");
    str(pk, "across hosts, rank 3 on m<1> held the others up");
    str(pk, "ranks");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 9);
    str(pk, "rank");
    msgpack_pack_uint64(pk, 3);
    str(pk, "host");
    str(pk, "m<1>");
    str(pk, "collectives");
    msgpack_pack_uint64(pk, 20);
    str(pk, "last");
    msgpack_pack_uint64(pk, 20);
    str(pk, "caused_ns");
    msgpack_pack_uint64(pk, 405200000);
    str(pk, "caused_bound_ns");
    msgpack_pack_uint64(pk, 330500);
    str(pk, "waited_ns");
    msgpack_pack_uint64(pk, 0);
    str(pk, "waited_bound_ns");
    msgpack_pack_uint64(pk, 0);
    str(pk, "late_steps");
    msgpack_pack_uint64(pk, 19);
    str(pk, "steps");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 8);
    str(pk, "step");
    msgpack_pack_uint64(pk, 7);
    str(pk, "step_ns");
    msgpack_pack_uint64(pk, 21000000);
    str(pk, "rank");
    msgpack_pack_uint64(pk, 3);
    str(pk, "host");
    str(pk, "m<1>");
    str(pk, "late_rank");
    msgpack_pack_nil(pk);
    str(pk, "held_up_ns");
    msgpack_pack_uint64(pk, 9000);
    str(pk, "bound_ns");
    msgpack_pack_uint64(pk, 16000);
    str(pk, "within_bound");
    msgpack_pack_true(pk);
    str(pk, "filter_hosts");
    msgpack_pack_map(pk, 2);
    str(pk, "counted");
    msgpack_pack_array(pk, 1);
    str(pk, "home");
    str(pk, "left_out");
    msgpack_pack_array(pk, 2);
    str(pk, "m<1>");
    str(pk, "m2");
}

Test(cli_report_html, hosts_late_and_filter_hosts)
{
    char *html = page_of(fill_late, 2);
    const char *t = strstr(html, "<section id=\"hosts-late\">");

    cr_assert_not_null(t, "%s", html);
    cr_assert_null(strstr(html, "m<1>"));
    cr_assert_not_null(strstr(t, "Times on home's clock"));
    cr_assert_not_null(strstr(t, "Instances analysed: 20 (who came last uncertain in 1); steps "
                                 "with a late rank named: 19, within the clock bound: 1"));
    cr_assert_not_null(strstr(t, "across hosts, rank 3 on m&lt;1&gt; held the others up"));
    /* the rank row: exact figures in data-v, human units shown */
    cr_assert_not_null(strstr(t, "<td data-v=\"405200000\">405 ms</td>"), "%s", t);
    cr_assert_not_null(strstr(t, "<td data-v=\"330500\">330 µs</td>"), "%s", t);
    /* the step row: no late rank named, within the bound */
    cr_assert_not_null(strstr(t, "<td data-v=\"\">-</td><td data-v=\"9000\">"), "%s", t);
    cr_assert_not_null(strstr(t, "data-v=\"true\">true</td>"), "%s", t);
    cr_assert_not_null(strstr(html, "<p class=\"note\" id=\"filter-hosts\">The filters cover "
                                    "home's entries only; not m&lt;1&gt;, m2 (entries stay"));
    /* before the Hosts and main sections: in the verdict's section, after the filter */
    cr_assert(strstr(html, "id=\"filter-hosts\"") < strstr(html, "<main"));
    free(html);
}

/* mpi: p2p pairs 0->1 (3 messages, 3072 bytes) and 1->0 (1, 8), no callsites (a filter). */
static void fill_mpi(msgpack_packer *pk)
{
    str(pk, "mpi");
    msgpack_pack_map(pk, 6);
    str(pk, "dropped_calls");
    msgpack_pack_uint64(pk, 0);
    str(pk, "ranks");
    msgpack_pack_array(pk, 0);
    str(pk, "comms");
    msgpack_pack_array(pk, 0);
    str(pk, "sizes");
    msgpack_pack_array(pk, 0);
    str(pk, "callsites");
    msgpack_pack_nil(pk);
    str(pk, "p2p");
    msgpack_pack_map(pk, 1);
    str(pk, "pairs");
    msgpack_pack_array(pk, 2);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(pk, 4);
        str(pk, "from");
        msgpack_pack_int(pk, i);
        str(pk, "to");
        msgpack_pack_int(pk, 1 - i);
        str(pk, "messages");
        msgpack_pack_uint64(pk, i ? 1 : 3);
        str(pk, "bytes");
        msgpack_pack_uint64(pk, i ? 8 : 3072);
    }
}

Test(cli_report_html, p2p_matrix_cells)
{
    char *html = page_of(fill_mpi, 1);
    const char *m = strstr(html, "<table id=\"mpi-p2p\"");

    cr_assert_not_null(m);
    /* 2 x 2: the diagonal empty, the two pairs with their figures, darkest the most bytes */
    cr_assert_not_null(strstr(m, "<tr><th>0</th><td class=\"nil\"></td><td "
                                 "style=\"background:hsl(0,90%,38%);color:#fff\" data-from=\"0\" "
                                 "data-to=\"1\" data-bytes=\"3072\" data-messages=\"3\""));
    cr_assert_not_null(strstr(m, "data-from=\"1\" data-to=\"0\" data-bytes=\"8\" "
                                 "data-messages=\"1\""));
    cr_assert_not_null(strstr(m, "title=\"0 to 1: 3.00 KiB in 3 messages\">3.00 KiB</td></tr>"));
    cr_assert_not_null(strstr(html, "id=\"mpi-sites\">(not counted"));
    cr_assert_null(strstr(html, "<section id=\"hosts\">"));
    free(html);
}

/* mpi with 1,100 pairs i -> i + 1 of i bytes (1,101 ranks): too many for a matrix. */
static void fill_many_pairs(msgpack_packer *pk)
{
    str(pk, "mpi");
    msgpack_pack_map(pk, 1);
    str(pk, "p2p");
    msgpack_pack_map(pk, 1);
    str(pk, "pairs");
    msgpack_pack_array(pk, 1100);
    for (int i = 0; i < 1100; i++) {
        msgpack_pack_map(pk, 4);
        str(pk, "from");
        msgpack_pack_int(pk, i);
        str(pk, "to");
        msgpack_pack_int(pk, i + 1);
        str(pk, "messages");
        msgpack_pack_uint64(pk, 1);
        str(pk, "bytes");
        msgpack_pack_uint64(pk, (uint64_t)i);
    }
}

Test(cli_report_html, many_ranks_list_the_top_pairs)
{
    char *html = page_of(fill_many_pairs, 1);
    const char *list = strstr(html, "<div id=\"mpi-p2p-pairs\">"), *p;
    int rows = 0;

    cr_assert_null(strstr(html, "id=\"mpi-p2p\""), "a matrix of 1,101 ranks");
    cr_assert_not_null(
        strstr(html, "more than 64 ranks, 1100 pairs: the 1024 with the most bytes"));
    cr_assert_not_null(list);
    /* most bytes first: 1099 -> 1100, ..., down to 76 -> 77 (the 1,024th) */
    cr_assert_not_null(strstr(list, "<tbody>\n<tr><td data-v=\"1099\">1099</td><td "
                                    "data-v=\"1100\">1100</td>"));
    for (p = list; (p = strstr(p, "<tr><td")) != NULL; p++)
        rows++;
    cr_assert_eq(rows, 1024);
    cr_assert_not_null(strstr(list, "<tr><td data-v=\"76\">76</td><td data-v=\"77\">"));
    cr_assert_null(strstr(list, "<tr><td data-v=\"75\">"));
    free(html);
}
