/* The API suites' group fixture (tests/test_api*.c): the tiny llama model of gguf_tiny (default params)
 * written to a temp file and loaded through memra_model_load, and the runtime params those suites start from.
 * Shared mutable state: api_tiny_model / api_tiny_path, set by the setup and cleared by the teardown (the
 * suite's one thread). */
#ifndef MEMRA_TEST_API_TINY_H
#define MEMRA_TEST_API_TINY_H

#include <stddef.h>
#include "memra/memra.h"

extern memra_model *api_tiny_model; /* the loaded model, between api_tiny_setup and api_tiny_teardown */
extern char api_tiny_path[256];     /* its file */

/* cmocka group fixtures: write and load the model (-1 after printing why); free it and remove the file. */
int api_tiny_setup(void **state);
int api_tiny_teardown(void **state);

/* memra_runtime_default_params() on the CPU backend with 4 emulated devices and no doors (apply_env 0):
 * `stages` stages on devices 0..stages-1 (stages <= 1: the door shut), n_ctx 64. */
memra_runtime_params api_tiny_params(int stages);

#define API_TINY_NV 300 /* the tiny model's vocabulary */

/* n prompt tokens of the tiny vocabulary, a different run for each salt: t[i] = (37 i + 11 salt + 5) % NV. */
void api_tiny_prompt(memra_token *t, int n, int salt);

/* Fails the running test unless msg names `what` and code's memra_status_str. */
void api_tiny_assert_error(const char *msg, int code, const char *what);

#endif
