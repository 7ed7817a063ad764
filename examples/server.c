/* A server-style embed: several client threads share one runtime; each opens its own sequence, primes its
 * prompt and decodes greedily, submitting concurrently with the others (the runtime serializes submits and
 * keeps every client's step in the pipeline at once). Results are printed when every client is done.
 *   example-server MODEL.gguf [n_clients=4] [n_predict=16]
 * Exit 0 when every client produced n_predict tokens (or stopped at end of generation). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "memra/memra.h"

static const char *PROMPTS[] = {"The capital of France is", "Once upon a time", "The three primary colors are",
                                "def fibonacci(n):", "My favourite food is", "In the beginning"};

typedef struct client {
    memra_runtime *rt;
    const memra_model *model;
    int id, n_predict, n_gen, status;
    char text[4096];
    char err[MEMRA_ERR_MAX];
} client;

static int run_client(client *c)
{
    const char *prompt = PROMPTS[c->id % (int)(sizeof PROMPTS / sizeof *PROMPTS)];
    memra_token toks[256];
    int n = 0, r, len = 0;
    if ((r = memra_tokenize(c->model, prompt, (int)strlen(prompt), 1, 0, toks, 256, &n)) != 0)
        return r;
    memra_seq *seq = memra_seq_open(c->rt); /* one sequence per client */
    if (!seq)
        return memra_last_status();
    memra_pending *p = NULL;
    r = memra_seq_prime(seq, toks, n, 0, &p);
    len = snprintf(c->text, sizeof c->text, "%s", prompt);
    while (r == 0 && p) {
        const float *logits;
        if ((r = memra_pending_wait(p, &logits, NULL)) != 0)
            break;
        memra_token t = memra_argmax(logits, memra_model_n_vocab(c->model));
        memra_pending_free(p);
        p = NULL;
        if (memra_token_is_eog(c->model, t))
            break;
        int np = 0;
        if (len < (int)sizeof c->text - 64 &&
            memra_token_to_piece(c->model, t, c->text + len, (int)sizeof c->text - 1 - len, 0, &np) == 0)
            len += np, c->text[len] = '\0';
        if (++c->n_gen < c->n_predict)
            r = memra_seq_decode(seq, t, &p); /* returns at once: other clients submit meanwhile */
    }
    memra_pending_free(p);
    memra_seq_close(seq);
    return r;
}

static void *client_main(void *arg)
{
    client *c = arg;
    c->status = run_client(c);
    if (c->status)
        snprintf(c->err, sizeof c->err, "%s", memra_last_error()); /* this thread's last error */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: %s MODEL.gguf [n_clients] [n_predict]\n", argv[0]), 2;
    int n_clients = argc > 2 ? atoi(argv[2]) : 4, n_predict = argc > 3 ? atoi(argv[3]) : 16;
    if (n_clients < 1 || n_clients > 64 || n_predict < 1)
        return fprintf(stderr, "n_clients must be 1..64 and n_predict >= 1\n"), 2;
    memra_model *model = memra_model_load(argv[1], NULL);
    memra_runtime_params rp = memra_runtime_default_params();
    rp.n_seq = n_clients; /* one KV slot per client */
    rp.n_ctx = 256;
    memra_runtime *rt = model ? memra_runtime_create(model, &rp) : NULL;
    if (!rt)
        return fprintf(stderr, "%s\n", memra_last_error()), memra_model_free(model), 1;
    client *cs = calloc((size_t)n_clients, sizeof *cs);
    pthread_t *th = calloc((size_t)n_clients, sizeof *th);
    for (int i = 0; i < n_clients; i++) {
        cs[i] = (client){.rt = rt, .model = model, .id = i, .n_predict = n_predict};
        pthread_create(&th[i], NULL, client_main, &cs[i]);
    }
    int failed = 0;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(th[i], NULL);
        if (cs[i].status)
            failed++, printf("client %d: FAILED %s\n", i, cs[i].err);
        else
            printf("client %d: %d tokens: %s\n", i, cs[i].n_gen, cs[i].text);
    }
    memra_counters ctr;
    memra_runtime_counters(rt, &ctr);
    printf("runtime: %d stages, %llu steps, %llu tokens decoded, %llu prompt tokens\n", memra_runtime_n_stages(rt),
           (unsigned long long)ctr.steps_done, (unsigned long long)ctr.tokens_decoded,
           (unsigned long long)ctr.tokens_primed);
    free(cs);
    free(th);
    memra_runtime_free(rt);
    memra_model_free(model);
    return failed ? 1 : 0;
}
