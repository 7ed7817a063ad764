/* A program built against the INSTALLED memra package (find_package(memra) or pkg-config memra): checks
 * the header and library versions agree, then loads MODEL, generates a few greedy tokens and says OK.
 *   consumer MODEL.gguf */
#include <stdio.h>
#include <string.h>
#include "memra/memra.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: consumer MODEL.gguf\n"), 2;
    if (strcmp(memra_version(), MEMRA_VERSION_STRING) != 0)
        return fprintf(stderr, "header %s but library %s\n", MEMRA_VERSION_STRING, memra_version()), 1;
    memra_model *m = memra_model_load(argv[1], NULL);
    memra_runtime_params rp = memra_runtime_default_params();
    rp.n_seq = 1;
    rp.n_ctx = 64;
    memra_runtime *rt = m ? memra_runtime_create(m, &rp) : NULL;
    memra_token prompt[2] = {1, 2}, out[4];
    memra_request req = {.prompt = prompt, .n_prompt = 2, .n_predict = 4,
                         .sampling = memra_sampler_greedy_params(), .out = out, .out_cap = 4};
    int rc = rt ? memra_generate(rt, &req, 1, 0, NULL, NULL) : memra_last_status();
    if (rc || req.status || req.n_out != 4)
        fprintf(stderr, "consumer: %s (n_out %d)\n", memra_last_error(), req.n_out);
    else
        printf("consumer OK: memra %s, %s, %d layers, tokens %d %d %d %d\n", memra_version(), memra_model_arch(m),
               memra_model_n_layer(m), out[0], out[1], out[2], out[3]);
    memra_runtime_free(rt);
    memra_model_free(m);
    return rc || req.status || req.n_out != 4;
}
