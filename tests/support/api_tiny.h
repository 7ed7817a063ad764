/* The API suites' group fixture (tests/test_api*.c): the tiny llama model of gguf_tiny (default params)
 * written to a temp file and loaded through memra_model_load. No shared state. */
#ifndef MEMRA_TEST_API_TINY_H
#define MEMRA_TEST_API_TINY_H

#include <stddef.h>
#include "memra/memra.h"

/* Write the model into path (cap bytes, filled with its name) and load it; NULL after printing why. */
memra_model *api_tiny_open(char *path, size_t cap);
/* Free the model (NULL: a no-op) and remove its file. */
void api_tiny_close(memra_model *m, const char *path);

#endif
