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

char **tok_corpus_load(int *n)
{
    static const char *const files[2] = {"tokenizer_corpus.txt", "tokenizer_corpus_random.txt"};
    char **all = NULL;
    int k = 0;
    for (int f = 0; f < 2; f++) {
        char p[4096];
        int nl;
        char **lines = tok_read_lines(tok_data_path(files[f], p, sizeof p), &nl);
        if (!lines) {
            tok_lines_free(all, k);
            return NULL;
        }
        all = realloc(all, (size_t)(k + nl + 1) * sizeof *all);
        for (int i = 0; i < nl; i++) {
            if (lines[i][0] == '#')
                free(lines[i]);
            else
                all[k++] = lines[i];
        }
        free(lines);
    }
    *n = k;
    return all;
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

int tok_chat_cases_load(const char *path, tok_chat_case **out)
{
    int nl;
    char **lines = tok_read_lines(path, &nl);
    if (!lines)
        return -1;
    tok_chat_case *cs = calloc((size_t)nl + 1, sizeof *cs);
    int n = 0;
    for (int i = 0; i < nl;) {
        tok_chat_case *c = &cs[n];
        if (sscanf(lines[i], "case %63s %d %d", c->name, &c->add_generation_prompt, &c->n_msgs) != 3 ||
            c->n_msgs < 0 || c->n_msgs > 8 || i + 1 + c->n_msgs >= nl) {
            n = -1;
            break;
        }
        for (int m = 0; m < c->n_msgs; m++) {
            const char *l = lines[i + 1 + m];
            const char *sp = strncmp(l, "msg ", 4) == 0 ? strchr(l + 4, ' ') : NULL;
            if (!sp) {
                sp = l + strlen(l);
            }
            size_t cl;
            c->msgs[m].role = strndup(l + 4, (size_t)(sp - (l + 4)));
            c->msgs[m].content = tok_unescape(*sp ? sp + 1 : sp, &cl);
        }
        const char *o = lines[i + 1 + c->n_msgs];
        c->want = tok_unescape(strncmp(o, "out ", 4) == 0 ? o + 4 : "", &c->want_len);
        n++;
        i += 2 + c->n_msgs;
    }
    tok_lines_free(lines, nl);
    if (n < 0) {
        tok_chat_cases_free(cs, nl);
        return -1;
    }
    *out = cs;
    return n;
}

void tok_chat_cases_free(tok_chat_case *cases, int n)
{
    for (int i = 0; i < n; i++) {
        for (int m = 0; m < cases[i].n_msgs; m++) {
            free((char *)cases[i].msgs[m].role);
            free((char *)cases[i].msgs[m].content);
        }
        free(cases[i].want);
    }
    free(cases);
}
