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

/* Undo the corpus escaping (\n \t \r \\ \xHH); returns a malloc'd buffer (NUL-terminated too) and its
 * byte length in *len. */
char *tok_unescape(const char *s, size_t *len);

/* Parse space-separated integers into out (cap entries); returns the count. */
int tok_parse_ids(const char *s, int *out, int cap);

#endif
