/* The minimal embed: load a model, create a runtime, generate greedy text from a prompt.
 *   example-simple MODEL.gguf "The capital of France is" [n_predict] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "memra/memra.h"

static int print_piece(void *user, int req, memra_token tok, const char *piece, int n_piece)
{
    fwrite(piece, 1, (size_t)n_piece, stdout);
    return 0; /* keep going */
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fprintf(stderr, "usage: %s MODEL.gguf PROMPT [n_predict]\n", argv[0]), 2;
    memra_model *model = memra_model_load(argv[1], NULL);
    memra_runtime *rt = model ? memra_runtime_create(model, NULL) : NULL;
    memra_token prompt[512];
    int n_prompt = 0;
    if (!rt || memra_tokenize(model, argv[2], (int)strlen(argv[2]), 1, 0, prompt, 512, &n_prompt))
        return fprintf(stderr, "%s\n", memra_last_error()), memra_runtime_free(rt), memra_model_free(model), 1;
    memra_request req = {.prompt = prompt, .n_prompt = n_prompt, .n_predict = argc > 3 ? atoi(argv[3]) : 32,
                         .sampling = memra_sampler_greedy_params(), .stop_at_eog = 1};
    int rc = memra_generate(rt, &req, 1, 0, print_piece, NULL);
    printf("\n");
    if (rc || req.status)
        fprintf(stderr, "%s\n", memra_last_error());
    memra_runtime_free(rt);
    memra_model_free(model);
    return rc || req.status ? 1 : 0;
}
