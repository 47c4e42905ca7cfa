/*
 * cli_import_cut — token boundaries of a JSON text (see cli_import_cut.h).
 */
#include "cli_import_cut.h"

size_t import_cut_scan(struct import_cut *c, const unsigned char *s, size_t n)
{
    size_t cut = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char b = s[i];

        if (c->esc) {
            c->esc = false;
        } else if (c->in_str) {
            if (b == '\\')
                c->esc = true;
            else if (b == '"')
                c->in_str = false, cut = i + 1;
        } else if (b == '"') {
            c->in_str = true;
        } else if (b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == ',' || b == ':' ||
                   b == '{' || b == '}' || b == '[' || b == ']') {
            cut = i + 1;
        }
    }
    return cut;
}
