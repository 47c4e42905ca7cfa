/*
 * cli_report_html — the report as a self-contained HTML page (see
 * cli_report_html.h).
 */
#include "cli_report_html.h"
#include "cli_report_html_mpi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_json.h"
#include "cli_obj.h"

/* client/cli/html/style.css and script.js, embedded by cmake/embed_sql.cmake */
extern const char cli_html_style[];
extern const char cli_html_script[];

void cli_report_html_text(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(s[i], f);
        }
    }
}

/* A string value of map as HTML text; "-" when it is missing or not a string. */
static void cli_report_html_str(FILE *f, const msgpack_object *map, const char *key)
{
    const msgpack_object *v = cli_obj_get(map, key);
    char buf[64];

    if (v != NULL && v->type == MSGPACK_OBJECT_STR) {
        cli_report_html_text(f, v->via.str.ptr, v->via.str.size);
        return;
    }
    cli_obj_text(v, buf, sizeof(buf));
    cli_report_html_text(f, buf, strlen(buf));
}

/* Writes a JSON document of the page's data: the report map, or the flame graphs' stacks. */
static int cli_report_html_json(FILE *m, const msgpack_object *report,
                                const struct cli_report_flame *fl)
{
    int rc;

    if (report != NULL)
        return cli_json_write(m, report);
    fputs("{\"time\":", m);
    rc = cli_json_write_str(m, fl->time ? fl->time : "", fl->time_len);
    if (rc == 0)
        fputs(",\"memory\":", m);
    if (rc == 0)
        rc = cli_json_write_str(m, fl->memory ? fl->memory : "", fl->memory_len);
    fputs("}", m);
    return rc;
}

/*
 * The report map (or the stacks) as JSON inside <script type="application/
 * json" id="id">: every '<' written as \u003c (it occurs only inside
 * strings, where the escape means the same), so no "</script>" in an op
 * name can end the element.
 */
static int cli_report_html_data(FILE *f, const char *id, const msgpack_object *report,
                                const struct cli_report_flame *fl)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int rc;

    if (m == NULL)
        return -ENOMEM;
    rc = cli_report_html_json(m, report, fl);
    if (fclose(m) != 0 && rc == 0)
        rc = -ENOMEM;
    if (rc == 0) {
        fprintf(f, "<script type=\"application/json\" id=\"%s\">", id);
        for (size_t i = 0; i < len; i++) {
            if (buf[i] == '<')
                fputs("\\u003c", f);
            else
                fputc(buf[i], f);
        }
        fputs("</script>\n", f);
    }
    free(buf);
    return rc;
}

/* The flame graphs' data, or a note saying why there is none. */
static int cli_report_html_flame(FILE *f, const struct cli_report_flame *fl)
{
    const char *note = fl == NULL ? "not read" : fl->note;

    if (note == NULL && fl->time_len + fl->memory_len > CLI_REPORT_FLAME_MAX)
        note = "the session's stacks are too many for a page (tracectl export --format "
               "collapsed writes them all)";
    if (note == NULL)
        return cli_report_html_data(f, "stacks", NULL, fl);
    fputs("<p id=\"flame-note\" hidden>", f);
    cli_report_html_text(f, note, strlen(note));
    fputs("</p>\n", f);
    return ferror(f) ? -EIO : 0;
}

int cli_report_html_write(FILE *f, const msgpack_object *report,
                          const struct cli_report_flame *flame)
{
    const msgpack_object *session = cli_obj_get(report, "session");
    const msgpack_object *verdict = cli_obj_get(report, "verdict");
    const msgpack_object *hosts, *late, *fh, *mpi;
    int rc;

    if (report->type != MSGPACK_OBJECT_MAP)
        return -EINVAL;
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<title>tracectl report: ",
          f);
    cli_report_html_str(f, session, "name");
    fputs(" (", f);
    cli_report_html_str(f, session, "id");
    fputs(")</title>\n<style>\n", f);
    fputs(cli_html_style, f);
    fputs("</style>\n</head>\n<body>\n<header><h1>", f);
    cli_report_html_str(f, session, "name");
    fputs(" <small>session ", f);
    cli_report_html_str(f, session, "id");
    fputs("</small></h1><dl id=\"session\"></dl></header>\n"
          "<section id=\"verdict\"><h2>Verdict</h2><p>",
          f);
    if (verdict != NULL && verdict->type == MSGPACK_OBJECT_STR)
        cli_report_html_text(f, verdict->via.str.ptr, verdict->via.str.size);
    else
        fputs("(no analysis in this report)", f);
    fputs("</p><p id=\"filter\"></p>", f);
    if ((fh = cli_obj_get(report, "filter_hosts")) != NULL &&
        (rc = cli_report_html_filter_hosts(f, fh)) != 0)
        return rc;
    fputs("</section>\n", f);
    if ((hosts = cli_obj_get(report, "hosts")) != NULL &&
        (rc = cli_report_html_hosts(f, hosts)) != 0)
        return rc;
    if ((late = cli_obj_get(report, "hosts_late")) != NULL &&
        (rc = cli_report_html_hosts_late(f, late)) != 0)
        return rc;
    fputs("<main id=\"main\"></main>\n", f);
    if ((mpi = cli_obj_get(report, "mpi")) != NULL && (rc = cli_report_html_mpi(f, mpi)) != 0)
        return rc;
    fputs("<noscript><p>The charts and tables are drawn by the page's inline script.</p>"
          "</noscript>\n",
          f);
    if ((rc = cli_report_html_data(f, "report", report, NULL)) != 0 ||
        (rc = cli_report_html_flame(f, flame)) != 0)
        return rc;
    fputs("<script>\n", f);
    fputs(cli_html_script, f);
    fputs("</script>\n</body>\n</html>\n", f);
    return ferror(f) ? -EIO : 0;
}
