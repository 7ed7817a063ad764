/* memra-run: generate text from a GGUF model, llama-cli style.
 *   memra-run -m MODEL.gguf -p "The capital of France is" -n 16 --temp 0
 * Generated text goes to stdout only (streamed); the load progress bar, errors and the tokens/s summary go
 * to stderr. Exit: 0 ok, 1 runtime failure, 2 bad usage. The model runs through the pipeline runtime
 * (actors/pp.h): --stages/--devices (or the MEMRA_PP_* doors, which override them) split it into stage
 * actors; several -p prompts run as several sequences in flight; --spec K decodes speculatively.
 * State: all local to main (one submitting thread). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model/chat.h"
#include "model/sampler.h"
#include "actors/pp.h"
#include "gen.h"
#include "model/llama.h"

#define RUN_MAX_PROMPTS 16

typedef struct run_opts {
    const char *model, *prompt[RUN_MAX_PROMPTS];
    int n_prompts, n_predict, top_k, chat, n_ctx, chunk, spec;
    float temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    act_pp_config cfg; /* --stages / --devices; the MEMRA_PP_* doors override */
} run_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-run -m MODEL.gguf -p PROMPT [options]\n"
            "  -m, --model PATH        GGUF model (llama, qwen2 architectures)\n"
            "  -p, --prompt TEXT       prompt text; give -p up to 16 times to run the prompts as sequences in\n"
            "                          flight at once (each completion printed after the run)\n"
            "  -n, --n-predict N       tokens to generate (default 128; stops early at end of generation)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens, 0 = off (default 40)\n"
            "      --top-p P           nucleus sampling in (0, 1], 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P * p(max) in [0, 1), 0 = off (default 0.05)\n"
            "      --repeat-penalty R  penalty >= 1 on recent tokens, 1 = off (default 1.0)\n"
            "      --seed S            sampler seed (default 42)\n"
            "      --chat              wrap the prompt as a user turn with the model's chat template\n"
            "      --stages N          pipeline stages, layers cut evenly (default 1 = door shut)\n"
            "      --devices D0,D1,..  device ordinal of each stage (default: all on device 0)\n"
            "      --spec K            speculative greedy decoding: verify up to K prompt-lookup draft tokens\n"
            "                          per step (needs --temp 0 and one prompt; output = plain greedy)\n"
            "      --chunk N           prompt chunk rows for the prefill (default 32)\n"
            "  -c, --ctx-size N        context length (default 2048, at most the model's)\n"
            "  -h, --help              this text\n"
            "Text goes to stdout; progress and statistics to stderr. Backend: MEMRA_BACKEND=cpu|cuda;\n"
            "pipeline doors: MEMRA_PP_STAGES, MEMRA_PP_SPLITS, MEMRA_PP_DEVICES, ... (docs/doors.md).\n");
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
                     .min_p = 0.05f, .repeat_penalty = 1.0f, .seed = 42, .cfg = act_pp_config_default() };
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
            if (o->n_prompts == RUN_MAX_PROMPTS)
                return bad(a, v, "at most 16 prompts");
            o->prompt[o->n_prompts++] = v;
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
            if (parse_int(v, 1, ACT_PP_MAX_STAGES, &o->cfg.stages))
                return bad(a, v, "expected an integer in 1..64");
        } else if (!strcmp(a, "--spec")) {
            if (parse_int(v, 0, 64, &o->spec))
                return bad(a, v, "expected an integer in 0..64 (draft tokens per verify step)");
        } else if (!strcmp(a, "--chunk")) {
            if (parse_int(v, 1, 4096, &o->chunk))
                return bad(a, v, "expected an integer in 1..4096");
        } else if (!strcmp(a, "--devices")) {
            o->cfg.n_devices = 0;
            const char *c = v;
            while (c && *c) {
                char *end;
                long d = strtol(c, &end, 10);
                if (end == c || d < 0 || d >= 64 || (*end && *end != ',') || o->cfg.n_devices == 64)
                    return bad(a, v, "expected a comma-separated list of device ordinals (0..63), one per stage");
                o->cfg.devices[o->cfg.n_devices++] = (int)d;
                c = *end ? end + 1 : end;
            }
            if (!v || !o->cfg.n_devices)
                return bad(a, v, "expected a comma-separated list of device ordinals, one per stage");
        } else {
            fprintf(stderr, "memra-run: unknown flag '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->model)
        return bad("-m", NULL, "a model is required");
    if (!o->n_prompts)
        return bad("-p", NULL, "a prompt is required");
    if (o->cfg.n_devices && o->cfg.n_devices != (o->cfg.stages < 2 ? 1 : o->cfg.stages))
        return bad("--devices", NULL, "give one device per stage (--stages N needs N devices)");
    if (o->cfg.stages < 2)
        o->cfg.n_devices = 0; /* one stage: the primary device */
    if (o->spec && (o->temp != 0.0f || o->n_prompts > 1))
        return bad("--spec", NULL, "speculative decoding needs --temp 0 and a single prompt");
    return 0;
}

/* The load progress: a redrawn bar on a terminal; on a pipe or file, one line at the end. */
static void progress_bar(float frac, void *ctx)
{
    const int tty = *(const int *)ctx;
    if (!tty) {
        if (frac >= 1.0f)
            fprintf(stderr, "loading: done\n");
        return;
    }
    const int w = 40, filled = (int)(frac * w + 0.5f);
    fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "========================================", w - filled, "",
            (int)(frac * 100.0f + 0.5f));
    if (frac >= 1.0f)
        fputc('\n', stderr);
}


/* The prompt text, wrapped in the chat template when asked; *owned receives what to free. */
static const char *render_prompt(const mdl_tokenizer *tk, const char *prompt, int chat_on, char **owned,
                                 dev_err *err)
{
    *owned = NULL;
    if (!chat_on)
        return prompt;
    const char *tmpl = mdl_tokenizer_chat_template(tk);
    if (!tmpl) {
        dev_err_set(err, MEMRA_E_UNSUPPORTED, "--chat: the model has no tokenizer.chat_template");
        return NULL;
    }
    mdl_chat *chat = mdl_chat_create(tmpl, err);
    if (!chat)
        return NULL;
    const mdl_chat_msg msg = {.role = "user", .content = prompt};
    long len = mdl_chat_apply(chat, &msg, 1, 1, NULL, 0);
    if (len < 0)
        len = -len;
    char *text = malloc((size_t)len + 1);
    if (!text || mdl_chat_apply(chat, &msg, 1, 1, text, (size_t)len + 1) < 0) {
        free(text);
        text = NULL;
        dev_err_set(err, MEMRA_E_NOMEM, "--chat: could not render the chat template");
    }
    mdl_chat_destroy(chat);
    *owned = text;
    return text;
}

int main(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;

    dev_err err = {0};
    dev_platform *p = NULL;
    act_pp *rt = NULL;
    gen_seq seqs[RUN_MAX_PROMPTS];
    memset(seqs, 0, sizeof seqs);
    rc = 1;
    if (!(p = dev_platform_open_env(&err)))
        goto out;
    act_pp_params pp = act_pp_default_params();
    pp.config = o.cfg;
    pp.n_seq = o.n_prompts;
    pp.n_ctx = o.n_ctx;
    pp.max_rows = o.chunk > o.spec + 1 ? o.chunk : o.spec + 1;
    int tty = isatty(STDERR_FILENO);
    pp.progress = progress_bar;
    pp.progress_ctx = &tty;
    if (o.n_prompts > 1 && !getenv("MEMRA_PP_OVERLAP"))
        setenv("MEMRA_PP_OVERLAP", "1", 1); /* several sequences in flight: rotate the boundary slots */
    if (!(rt = act_pp_create(p, o.model, &pp, &err))) {
        if (err.code == MEMRA_E_INVAL) {
            fprintf(stderr, "memra-run: %s\n", err.msg);
            rc = 2;
            goto out_quiet;
        }
        goto out;
    }
    const mdl_model *m = act_pp_model(rt);
    const mdl_hparams *hp = mdl_model_hparams(m);
    const mdl_tokenizer *tk = mdl_model_tokenizer(m);
    if (!tk) {
        dev_err_set(&err, MEMRA_E_UNSUPPORTED, "%s has no tokenizer (tokenizer.ggml.* keys); memra-run needs one",
                    o.model);
        goto out;
    }
    if (hp->n_ctx_train > 0 && o.n_ctx > hp->n_ctx_train)
        o.n_ctx = hp->n_ctx_train;
    mdl_sampler_params sp = mdl_sampler_default_params();
    sp.temperature = o.temp;
    sp.top_k = o.top_k;
    sp.top_p = o.top_p;
    sp.min_p = o.min_p;
    sp.repeat_penalty = o.repeat_penalty;
    for (int i = 0; i < o.n_prompts; i++) {
        char *owned;
        const char *text = render_prompt(tk, o.prompt[i], o.chat, &owned, &err);
        if (!text)
            goto out;
        gen_seq *s = &seqs[i];
        sp.seed = o.seed + (uint64_t)i;
        s->toks = malloc(sizeof *s->toks * (size_t)o.n_ctx);
        s->smp = mdl_sampler_create(&sp, hp->n_vocab, &err);
        int n = s->toks ? mdl_tokenize(tk, text, strlen(text), 1, o.chat, s->toks, o.n_ctx) : MEMRA_E_NOMEM;
        free(owned);
        if (!s->smp)
            goto out;
        if (n < 0 || n >= o.n_ctx) {
            dev_err_set(&err, MEMRA_E_FULL, "prompt %d (%d tokens) does not fit in --ctx-size %d", i + 1,
                        n < 0 ? -n : n, o.n_ctx);
            goto out;
        }
        if (n == 0) {
            dev_err_set(&err, MEMRA_E_INVAL, "-p: prompt %d is empty after tokenization", i + 1);
            goto out;
        }
        s->n_prompt = s->n = n;
        for (int j = 0; j < n; j++)
            mdl_sampler_accept(s->smp, s->toks[j]);
    }
    gen_params gp = {.n_predict = o.n_predict, .chunk = o.chunk, .spec = o.spec, .stream = o.n_prompts == 1};
    gen_stats st;
    if (o.n_predict > 0 && gen_run(rt, tk, seqs, o.n_prompts, o.n_ctx, &gp, &st, &err) != 0)
        goto out;
    if (o.n_prompts == 1)
        fputc('\n', stdout);
    else
        for (int i = 0; i < o.n_prompts; i++)
            printf("%s%s\n", i ? "\n" : "", seqs[i].out ? seqs[i].out : "");
    fflush(stdout);
    if (o.n_predict > 0) {
        fprintf(stderr, "memra-run: %d stage(s), %d sequence(s): prompt %d tokens in %.2f s (%.1f tok/s), generated %d "
                        "tokens in %.2f s (%.1f tok/s)\n",
                act_pp_stages(rt), o.n_prompts, st.prompt_tokens, st.prime_s, st.prompt_tokens / st.prime_s,
                st.gen_tokens, st.decode_s, st.decode_s > 0 ? st.gen_tokens / st.decode_s : 0.0);
        if (o.spec)
            fprintf(stderr, "memra-run: speculative: %d verify steps, %d drafted, %d accepted (%.0f%%), %.2f tokens "
                            "per step\n",
                    st.steps, st.drafted, st.accepted, st.drafted ? 100.0 * st.accepted / st.drafted : 0.0,
                    st.steps ? (double)st.gen_tokens / st.steps : 0.0);
    }
    rc = 0;
    goto out_quiet;
out:
    fprintf(stderr, "memra-run: %s\n", err.msg[0] ? err.msg : "failed");
out_quiet:
    for (int i = 0; i < RUN_MAX_PROMPTS; i++) {
        free(seqs[i].toks);
        free(seqs[i].out);
        if (seqs[i].smp)
            mdl_sampler_destroy(seqs[i].smp);
    }
    act_pp_destroy(rt);
    if (p)
        dev_platform_close(p);
    return rc;
}
