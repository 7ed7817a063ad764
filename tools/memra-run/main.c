/* memra-run: generate text from a GGUF model, llama-cli style.
 *   memra-run -m MODEL.gguf -p "The capital of France is" -n 16 --temp 0
 * Generated text goes to stdout only (streamed); the load progress bar, errors and the tokens/s summary go
 * to stderr. Exit: 0 ok, 1 runtime failure, 2 bad usage. The model is driven by run_driver.c (the piece
 * the pipeline runtime replaces). State: all local to main (one thread). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/chat.h"
#include "model/sampler.h"
#include "run_driver.h"

typedef struct run_opts {
    const char *model, *prompt;
    int n_predict, top_k, chat, n_ctx, chunk;
    float temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    run_placement place;
} run_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-run -m MODEL.gguf -p PROMPT [options]\n"
            "  -m, --model PATH        GGUF model (llama, qwen2 architectures)\n"
            "  -p, --prompt TEXT       prompt text\n"
            "  -n, --n-predict N       tokens to generate (default 128; stops early at end of generation)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens, 0 = off (default 40)\n"
            "      --top-p P           nucleus sampling in (0, 1], 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P * p(max) in [0, 1), 0 = off (default 0.05)\n"
            "      --repeat-penalty R  penalty >= 1 on recent tokens, 1 = off (default 1.0)\n"
            "      --seed S            sampler seed (default 42)\n"
            "      --chat              wrap the prompt as a user turn with the model's chat template\n"
            "      --stages N          pipeline stages, layers cut evenly (default 1)\n"
            "      --devices D0,D1,..  device ordinal of each stage (default: all on device 0)\n"
            "  -c, --ctx-size N        context length (default 2048, at most the model's)\n"
            "  -h, --help              this text\n"
            "Text goes to stdout; progress and statistics to stderr. Backend: MEMRA_BACKEND=cpu|cuda.\n");
}

static int bad(const char *flag, const char *val, const char *allowed)
{
    fprintf(stderr, "memra-run: %s %s: %s\n\n", flag, val ? val : "(missing value)", allowed);
    usage(stderr);
    return 2;
}

static int parse_int(const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

static int parse_float(const char *v, float lo, float hi, float *out)
{
    char *end;
    float x = v ? strtof(v, &end) : 0;
    if (!v || !*v || *end || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

/* Fill o from argv; returns 0, or 2 after printing what was wrong (1 = -h printed, exit 0). */
static int parse_args(int argc, char **argv, run_opts *o)
{
    *o = (run_opts){ .n_predict = 128, .top_k = 40, .n_ctx = 2048, .chunk = 32, .temp = 0.8f, .top_p = 0.95f,
                     .min_p = 0.05f, .repeat_penalty = 1.0f, .seed = 42, .place = { .n_stages = 1 } };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--chat")) {
            o->chat = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v)
                return bad(a, v, "expected a path");
            o->model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!v)
                return bad(a, v, "expected the prompt text");
            o->prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (parse_int(v, 0, 1 << 20, &o->n_predict))
                return bad(a, v, "expected an integer in 0..1048576");
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (parse_int(v, 1, 1 << 20, &o->n_ctx))
                return bad(a, v, "expected an integer in 1..1048576");
        } else if (!strcmp(a, "--temp")) {
            if (parse_float(v, 0.0f, 100.0f, &o->temp))
                return bad(a, v, "expected a number in [0, 100]");
        } else if (!strcmp(a, "--top-k")) {
            if (parse_int(v, 0, 1 << 30, &o->top_k))
                return bad(a, v, "expected an integer >= 0");
        } else if (!strcmp(a, "--top-p")) {
            if (parse_float(v, 0.0f, 1.0f, &o->top_p) || o->top_p == 0.0f)
                return bad(a, v, "expected a number in (0, 1]");
        } else if (!strcmp(a, "--min-p")) {
            if (parse_float(v, 0.0f, 1.0f, &o->min_p) || o->min_p == 1.0f)
                return bad(a, v, "expected a number in [0, 1)");
        } else if (!strcmp(a, "--repeat-penalty")) {
            if (parse_float(v, 1.0f, 100.0f, &o->repeat_penalty))
                return bad(a, v, "expected a number in [1, 100]");
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = v ? strtoull(v, &end, 10) : 0;
            if (!v || !*v || *end || errno || v[0] == '-')
                return bad(a, v, "expected a non-negative integer");
            o->seed = s;
        } else if (!strcmp(a, "--stages")) {
            if (parse_int(v, 1, 64, &o->place.n_stages))
                return bad(a, v, "expected an integer in 1..64");
        } else if (!strcmp(a, "--devices")) {
            o->place.n_devices = 0;
            const char *c = v;
            while (c && *c) {
                char *end;
                long d = strtol(c, &end, 10);
                if (end == c || d < 0 || d >= 64 || (*end && *end != ',') || o->place.n_devices == 64)
                    return bad(a, v, "expected a comma-separated list of device ordinals (0..63), one per stage");
                o->place.devices[o->place.n_devices++] = (int)d;
                c = *end ? end + 1 : end;
            }
            if (!v || !o->place.n_devices)
                return bad(a, v, "expected a comma-separated list of device ordinals, one per stage");
        } else {
            fprintf(stderr, "memra-run: unknown flag '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->model)
        return bad("-m", NULL, "a model is required");
    if (!o->prompt)
        return bad("-p", NULL, "a prompt is required");
    return 0;
}

static void progress_bar(float frac, void *ctx)
{
    (void)ctx;
    const int w = 40, filled = (int)(frac * w + 0.5f);
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "========================================", w - filled, "",
            (int)(frac * 100.0f + 0.5f));
    if (frac >= 1.0f)
        fputc('\n', stderr);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;

    dev_err err = { 0 };
    dev_platform *p = NULL;
    mdl_model *m = NULL;
    run_driver *drv = NULL;
    mdl_sampler *smp = NULL;
    mdl_chat *chat = NULL;
    dev_device **layer_dev = NULL;
    int32_t *toks = NULL;
    float *logits = NULL;
    char *text = NULL;
    rc = 1;

    if (!(p = dev_platform_open_env(&err)))
        goto out;
    int n_layer = mdl_model_peek_n_layer(o.model, &err);
    if (n_layer < 0)
        goto out;
    if (!(layer_dev = calloc((size_t)n_layer, sizeof *layer_dev))) {
        dev_err_set(&err, MEMRA_E_NOMEM, "no memory");
        goto out;
    }
    if (run_place_layers(p, &o.place, n_layer, layer_dev, &err)) {
        fprintf(stderr, "memra-run: %s\n\n", err.msg);
        usage(stderr);
        rc = 2;
        goto out_quiet;
    }
    mdl_load_params lp = { .platform = p, .layer_dev = layer_dev, .progress = progress_bar };
    if (!(m = mdl_model_load(o.model, &lp, &err)))
        goto out;
    const mdl_hparams *hp = mdl_model_hparams(m);
    const mdl_tokenizer *tk = mdl_model_tokenizer(m);
    if (!tk) {
        dev_err_set(&err, MEMRA_E_UNSUPPORTED, "%s has no tokenizer (tokenizer.ggml.* keys); memra-run needs one",
                    o.model);
        goto out;
    }
    if (hp->n_ctx_train > 0 && o.n_ctx > hp->n_ctx_train)
        o.n_ctx = hp->n_ctx_train;

    /* the prompt, wrapped in the chat template when asked */
    const char *prompt = o.prompt;
    if (o.chat) {
        const char *tmpl = mdl_tokenizer_chat_template(tk);
        if (!tmpl) {
            dev_err_set(&err, MEMRA_E_UNSUPPORTED, "--chat: the model has no tokenizer.chat_template");
            goto out;
        }
        if (!(chat = mdl_chat_create(tmpl, &err)))
            goto out;
        const mdl_chat_msg msg = { .role = "user", .content = o.prompt };
        long len = mdl_chat_apply(chat, &msg, 1, 1, NULL, 0);
        if (len < 0)
            len = -len;
        if (!(text = malloc((size_t)len + 1)) || mdl_chat_apply(chat, &msg, 1, 1, text, (size_t)len + 1) < 0) {
            dev_err_set(&err, MEMRA_E_NOMEM, "--chat: could not render the chat template");
            goto out;
        }
        prompt = text;
    }
    if (!(toks = malloc(sizeof *toks * (size_t)o.n_ctx)) || !(logits = malloc(sizeof *logits * hp->n_vocab))) {
        dev_err_set(&err, MEMRA_E_NOMEM, "no memory");
        goto out;
    }
    int n = mdl_tokenize(tk, prompt, strlen(prompt), 1, o.chat, toks, o.n_ctx);
    if (n < 0) {
        dev_err_set(&err, MEMRA_E_FULL, "the prompt (%d tokens) does not fit in --ctx-size %d", -n, o.n_ctx);
        goto out;
    }
    if (n == 0) {
        dev_err_set(&err, MEMRA_E_INVAL, "-p: the prompt is empty after tokenization");
        goto out;
    }
    if (!(drv = run_driver_create(p, m, o.n_ctx, o.chunk, &err)))
        goto out;
    mdl_sampler_params sp = mdl_sampler_default_params();
    sp.temperature = o.temp;
    sp.top_k = o.top_k;
    sp.top_p = o.top_p;
    sp.min_p = o.min_p;
    sp.repeat_penalty = o.repeat_penalty;
    sp.seed = o.seed;
    if (!(smp = mdl_sampler_create(&sp, hp->n_vocab, &err)))
        goto out;
    for (int i = 0; i < n; i++)
        mdl_sampler_accept(smp, toks[i]);

    const int n_prompt = n;
    const double t0 = now_s();
    if (run_driver_eval(drv, toks, n, 0, logits, &err))
        goto out;
    const double t1 = now_s();
    int n_gen = 0;
    char piece[256];
    while (n_gen < o.n_predict) {
        const int32_t next = mdl_sampler_sample(smp, logits);
        if (next < 0 || mdl_tokenizer_is_eog(tk, next))
            break;
        mdl_sampler_accept(smp, next);
        const int len = mdl_token_to_piece(tk, next, piece, (int)sizeof piece, 0);
        if (len > 0) {
            fwrite(piece, 1, (size_t)len, stdout);
            fflush(stdout);
        }
        n_gen++;
        if (n + 1 > o.n_ctx) {
            fprintf(stderr, "\nmemra-run: context full (%d tokens)\n", o.n_ctx);
            break;
        }
        toks[n] = next;
        if (n_gen < o.n_predict && run_driver_eval(drv, &toks[n], 1, n, logits, &err))
            goto out;
        n++;
    }
    const double t2 = now_s();
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "memra-run: prompt %d tokens in %.2f s (%.1f tok/s), generated %d tokens in %.2f s "
            "(%.1f tok/s)\n", n_prompt, t1 - t0,
            (t1 - t0) > 0 ? n_prompt / (t1 - t0) : 0.0, n_gen, t2 - t1, (t2 - t1) > 0 ? n_gen / (t2 - t1) : 0.0);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "memra-run: %s: %s\n", memra_status_str(err.code), err.msg);
out_quiet:
    mdl_sampler_destroy(smp);
    run_driver_destroy(drv);
    mdl_model_free(m);
    if (p)
        dev_platform_close(p);
    free(layer_dev);
    free(toks);
    free(logits);
    free(text);
    mdl_chat_destroy(chat);
    return rc;
}
