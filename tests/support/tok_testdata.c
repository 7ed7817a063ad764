/* Test-only oracle file helpers (see tok_testdata.h). */
#include "support/tok_testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tok_data_path(const char *name, char *buf, size_t cap)
{
    const char *src = getenv("MEMRA_SRC_DIR");
    snprintf(buf, cap, "%s/tests/data/%s", src && *src ? src : ".", name);
    return buf;
}

char **tok_read_lines(const char *path, int *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char **lines = NULL;
    int cnt = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t l;
    while ((l = getline(&line, &lcap, f)) >= 0) {
        if (l > 0 && line[l - 1] == '\n')
            line[--l] = '\0';
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            lines = realloc(lines, (size_t)cap * sizeof *lines);
        }
        lines[cnt++] = strdup(line);
    }
    free(line);
    fclose(f);
    *n = cnt;
    return lines ? lines : calloc(1, sizeof *lines);
}

void tok_lines_free(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0;
}

char *tok_unescape(const char *s, size_t *len)
{
    size_t n = strlen(s), w = 0;
    char *o = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[i + 1];
            if (c == 'n' || c == 't' || c == 'r' || c == '\\') {
                o[w++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : '\\';
                i++;
                continue;
            }
            if (c == 'x' && i + 3 < n) {
                o[w++] = (char)(hexv(s[i + 2]) * 16 + hexv(s[i + 3]));
                i += 3;
                continue;
            }
        }
        o[w++] = s[i];
    }
    o[w] = '\0';
    *len = w;
    return o;
}

int tok_parse_ids(const char *s, int *out, int cap)
{
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s)
            break;
        if (n < cap)
            out[n] = (int)v;
        n++;
        s = end;
    }
    return n;
}
