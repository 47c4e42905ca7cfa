/*
 * cli_report_html — the report as a self-contained HTML page (see
 * cli_report_html.h).
 */
#include "cli_report_html.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_json.h"
#include "cli_obj.h"

/* client/cli/html/style.css and script.js, embedded by cmake/embed_sql.cmake */
extern const char cli_html_style[];
extern const char cli_html_script[];

/* Writes s[0..n) as HTML text: the five characters markup gives a meaning escaped. */
static void cli_report_html_text(FILE *f, const char *s, size_t n)
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

/*
 * The report map as JSON inside <script type="application/json">: every '<'
 * written as \u003c (it occurs only inside strings, where the escape means
 * the same), so no "</script>" in an op name can end the element.
 */
static int cli_report_html_data(FILE *f, const msgpack_object *report)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int rc;

    if (m == NULL)
        return -ENOMEM;
    rc = cli_json_write(m, report);
    if (fclose(m) != 0 && rc == 0)
        rc = -ENOMEM;
    if (rc == 0) {
        fputs("<script type=\"application/json\" id=\"report\">", f);
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

int cli_report_html_write(FILE *f, const msgpack_object *report)
{
    const msgpack_object *session = cli_obj_get(report, "session");
    const msgpack_object *verdict = cli_obj_get(report, "verdict");
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
    fputs("</p><p id=\"filter\"></p></section>\n<main id=\"main\"></main>\n"
          "<noscript><p>The charts and tables are drawn by the page's inline script.</p>"
          "</noscript>\n",
          f);
    if ((rc = cli_report_html_data(f, report)) != 0)
        return rc;
    fputs("<script>\n", f);
    fputs(cli_html_script, f);
    fputs("</script>\n</body>\n</html>\n", f);
    return ferror(f) ? -EIO : 0;
}
