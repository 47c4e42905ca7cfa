/* proto_class.c — the communication words; see proto_class.h. */
#include "proto_class.h"

#include <string.h>

#include "util.h"

static const struct {
    const char *word;
    int loose;
} proto_comm_words[] = {
#define PROTO_COMM_ROW(w, l) {w, l},
    PROTO_COMM_WORDS(PROTO_COMM_ROW)
#undef PROTO_COMM_ROW
};

static char proto_class_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

bool proto_class_contains(const char *name, const char *word)
{
    size_t wlen = strlen(word);

    for (; *name != '\0'; name++) {
        size_t i = 0;

        while (i < wlen && name[i] != '\0' && proto_class_lower(name[i]) == word[i])
            i++;
        if (i == wlen)
            return true;
    }
    return false;
}

bool proto_class_comm(const char *name, bool strict)
{
    const char *p = PROTO_COMM_PREFIX;
    size_t i = 0;

    if (name == NULL)
        return false;
    while (p[i] != '\0' && proto_class_lower(name[i]) == p[i])
        i++;
    if (p[i] == '\0')
        return true;
    for (size_t k = 0; k < UTIL_ARRAY_LEN(proto_comm_words); k++)
        if ((!strict || proto_comm_words[k].loose == PROTO_COMM_STRICT) &&
            proto_class_contains(name, proto_comm_words[k].word))
            return true;
    return false;
}
