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
