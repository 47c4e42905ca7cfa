/*
 * cli_import_cut — where a JSON text may be cut so that no token spans the
 * cut, for the importer's feeding of yajl (cli_import_kineto).
 *
 * WHY. yajl's callback parser accepts the text in pieces, but a token that
 * a piece leaves unfinished is kept in yajl's own buffer and lexed again
 * from its first byte with every later piece: a string of L bytes fed in
 * pieces of B costs about L * L / (2 * B) bytes of lexing. A trace holding
 * one 25 MB string took 2.5 s, 50 MB 8.2 s, 1 GiB more than 600 s. The
 * importer therefore hands yajl only texts that end at a token boundary,
 * found here in one pass over each byte, and keeps an unfinished token
 * itself until it ends (see KINETO_MAX_TOKEN for the cap on its length).
 *
 * A boundary is just after a byte outside any string that is whitespace or
 * one of {}[],: , or just after a string's closing quote. Never after a
 * number or a literal: yajl needs the byte after one to know it ended.
 *
 * The caller's memory (zero it to start); no allocation; single-threaded.
 */
#ifndef TRACECTL_CLI_IMPORT_CUT_H
#define TRACECTL_CLI_IMPORT_CUT_H

#include <stdbool.h>
#include <stddef.h>

struct import_cut {
    bool in_str; /* inside a string */
    bool esc;    /* ... just after its backslash */
};

/*
 * Scans s[0..n), which continues the text scanned so far. Returns the
 * length of the longest prefix of s that ends at a boundary, 0 when none
 * does.
 */
size_t import_cut_scan(struct import_cut *c, const unsigned char *s, size_t n);

#endif
