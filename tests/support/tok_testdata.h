/* Test-only helpers for the tokenizer/chat oracle files under tests/data (format: see
 * tools/ref/make_tokenizer_oracle.py). */
#ifndef TESTS_TOK_TESTDATA_H
#define TESTS_TOK_TESTDATA_H

#include <stddef.h>

/* "$MEMRA_SRC_DIR/tests/data/<name>" into buf (MEMRA_SRC_DIR defaults to "."); returns buf. */
const char *tok_data_path(const char *name, char *buf, size_t cap);

/* All lines of a file, without their '\n'. Returns a malloc'd array of *n malloc'd strings, or NULL
 * when the file cannot be read. Free with tok_lines_free. */
char **tok_read_lines(const char *path, int *n);
void tok_lines_free(char **lines, int n);

/* Every case of tokenizer_corpus.txt then tokenizer_corpus_random.txt (comments dropped), still escaped:
 * the order of the oracle files. NULL when a file is missing. Free with tok_lines_free. */
char **tok_corpus_load(int *n);

/* Undo the corpus escaping (\n \t \r \\ \xHH); returns a malloc'd buffer (NUL-terminated too) and its
 * byte length in *len. */
char *tok_unescape(const char *s, size_t *len);

/* Parse space-separated integers into out (cap entries); returns the count. */
int tok_parse_ids(const char *s, int *out, int cap);

/* One case of chat_oracle_*.txt: messages and HF apply_chat_template's rendering. */
#include "model/chat.h"
typedef struct tok_chat_case {
    char name[64];
    int add_generation_prompt;
    int n_msgs;
    mdl_chat_msg msgs[8];  /* role/content strings owned by the case */
    char *want;            /* expected rendering (NUL-terminated) */
    size_t want_len;
} tok_chat_case;

/* Load every case of a chat oracle file; returns the count (malloc'd array in *cases) or -1. */
int tok_chat_cases_load(const char *path, tok_chat_case **cases);
void tok_chat_cases_free(tok_chat_case *cases, int n);

#endif
