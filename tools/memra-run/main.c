/* memra-run: generate text from a GGUF model, llama-cli style.
 *   memra-run -m MODEL.gguf -p "The capital of France is" -n 16 --temp 0
 * stdout gets each prompt followed by its generated text (streamed for one prompt; with --chat the answer
 * starts on the next line); the load progress bar, errors and the tokens/s summary go to stderr. A usage
 * error is one line naming what was wrong, then "see memra-run --help". Exit: 0 ok, 1 runtime failure,
 * 2 bad usage. Built on the public C API (memra/memra.h) only:
 * --stages/--devices (or the MEMRA_PP_* doors, which override them) split the model into stage actors;
 * several -p prompts run as several sequences in flight; --spec K decodes speculatively.
 * State: local to main (one submitting thread), except the signal flag below. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "memra/memra.h"

#define RUN_MAX_PROMPTS 16

typedef struct run_opts {
    const char *model, *prompt[RUN_MAX_PROMPTS];
    const char *trace; /* --trace FILE, or NULL */
    const char *chat_template; /* --chat-template: a name or template text; NULL = the model's */
    int n_prompts, n_predict, top_k, chat, n_ctx, chunk, spec;
    float temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    int stages, n_devices, devices[64]; /* --stages / --devices; the MEMRA_PP_* doors override */
    memra_kv_type kv_type;              /* --kv-type; DEFAULT: the MEMRA_KV_TYPE door, else f32 */
    memra_kv_type act_type;             /* --act-type; DEFAULT: the MEMRA_ACT_TYPE door, else f32 */
} run_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memra-run -m MODEL.gguf -p PROMPT [options]\n"
            "  -m, --model PATH        GGUF model (llama, qwen2 architectures)\n"
            "  -p, --prompt TEXT       prompt text; give -p up to 16 times to run the prompts as sequences in\n"
            "                          flight at once (their lines printed as they complete, prefixed [i])\n"
            "  -n, --n-predict N       tokens to generate (default 128; stops early at end of generation, or where\n"
            "                          the context fills, saying so)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens, 0 = off (default 40)\n"
            "      --top-p P           nucleus sampling in (0, 1], 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P * p(max) in [0, 1), 0 = off (default 0.05)\n"
            "      --repeat-penalty R  penalty >= 1 on recent tokens, 1 = off (default 1.0)\n"
            "      --seed S            sampler seed (default 42)\n"
            "      --chat              wrap the prompt as a user turn with the model's chat template: an\n"
            "                          instruct model then answers a question instead of continuing the text\n"
            "      --chat-template T   --chat with this template: a name (chatml, llama3, gemma) or template\n"
            "                          text (default: the model's)\n"
            "      --stages N          pipeline stages, layers cut evenly (default 1: no pipeline, one stage\n"
            "                          runs the whole model)\n"
            "      --devices D0,D1,..  device ordinal of each stage (default: all on device 0)\n"
            "      --spec K            speculative greedy decoding: verify up to K prompt-lookup draft tokens\n"
            "                          per step (needs --temp 0 and one prompt; output = plain greedy)\n"
            "      --chunk N           prompt chunk rows for the prefill (default 32)\n"
            "      --kv-type T         KV cache elements: f32, f16 or bf16 (default: MEMRA_KV_TYPE, else f32;\n"
            "                          16-bit halves the cache's memory)\n"
            "      --act-type T        matmul input rows: f32, f16 or bf16 (default: MEMRA_ACT_TYPE, else f32)\n"
            "  -c, --ctx-size N        context length (default 2048, at most the model's)\n"
            "      --trace FILE        record a trace of the run into FILE (Chrome Trace Event JSON; view it with\n"
            "                          memra-trace html FILE -o OUT.html, docs/trace.md)\n"
            "  -h, --help              this text\n"
            "stdout: one prompt, then its generated text as it comes; with several prompts, each completed line\n"
            "prefixed \"[i] \" (i = the prompt's number), each request's last partial line when the run ends.\n"
            "SIGINT/SIGTERM stops the run cleanly between steps, prints what was generated so far and exits 130\n"
            "(SIGINT) or 143 (SIGTERM); a second signal ends it at once. Progress and statistics go to stderr\n"
            "(prompt and generation tok/s apart). Backend: MEMRA_BACKEND=cpu|cuda.\n"
            "Doors are MEMRA_* environment variables that switch a feature on (docs/doors.md); they override the\n"
            "options. A door \"shut\" (unset, or MEMRA_PP_STAGES=0 or 1) keeps the plain path: one stage, no pipeline.\n"
            "Pipeline doors: MEMRA_PP_STAGES, MEMRA_PP_SPLITS, MEMRA_PP_DEVICES, ...\n");
}

/* A usage error: one line saying what was wrong, then where the full text is. Returns 2 (the exit code). */
static int usage_error(const char *what)
{
    fprintf(stderr, "memra-run: %s (see memra-run --help)\n", what);
    return 2;
}

/* The first SIGINT/SIGTERM sets it (the handler only stores: async-signal-safe); the runtime's abort
 * callback reads it between steps, so the run stops cleanly and what it generated is printed. The handler
 * resets itself (SA_RESETHAND): a second signal ends the process the default way. */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

static int stop_requested(void *user)
{
    (void)user;
    return g_signal != 0;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* flag's value val is wrong (val NULL: the command line ended before it); allowed says what is allowed. */
static int bad(const char *flag, const char *val, const char *allowed)
{
    char msg[512];
    if (val)
        snprintf(msg, sizeof msg, "%s %s: %s", flag, val, allowed);
    else
        snprintf(msg, sizeof msg, "%s needs a value after it: %s", flag, allowed);
    return usage_error(msg);
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
                     .min_p = 0.05f, .repeat_penalty = 1.0f, .seed = 42, .stages = 1 };
    const char *devices_arg = NULL; /* the --devices text, for its error */
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
        } else if (!strcmp(a, "--chat-template")) {
            if (!v || !*v)
                return bad(a, v, "expected a template name (chatml, llama3, gemma) or template text");
            const memra_chat_message probe = {.role = "user", .content = "hi"};
            size_t len = 0;
            const int r = memra_chat_apply(NULL, v, &probe, 1, 1, NULL, 0, &len);
            if (r != MEMRA_OK && r != MEMRA_E_FULL) /* an unknown format is refused here, before the model loads */
                return bad(a, v, memra_last_error());
            o->chat_template = v;
            o->chat = 1;
        } else if (!strcmp(a, "--trace")) {
            if (!v || !*v)
                return bad(a, v, "expected the path of the trace file to write");
            o->trace = v;
        } else if (!strcmp(a, "--stages")) {
            if (parse_int(v, 1, 64, &o->stages))
                return bad(a, v, "expected an integer in 1..64");
        } else if (!strcmp(a, "--spec")) {
            if (parse_int(v, 0, 64, &o->spec))
                return bad(a, v, "expected an integer in 0..64 (draft tokens per verify step)");
        } else if (!strcmp(a, "--chunk")) {
            if (parse_int(v, 1, 4096, &o->chunk))
                return bad(a, v, "expected an integer in 1..4096");
        } else if (!strcmp(a, "--kv-type") || !strcmp(a, "--act-type")) {
            static const char *const names[] = {"f32", "f16", "bf16"};
            static const memra_kv_type types[] = {MEMRA_KV_F32, MEMRA_KV_F16, MEMRA_KV_BF16};
            int k = 0;
            while (k < 3 && !(v && !strcmp(v, names[k])))
                k++;
            if (k == 3)
                return bad(a, v, "expected f32, f16 or bf16");
            memra_kv_type *field = !strcmp(a, "--kv-type") ? &o->kv_type : &o->act_type;
            *field = types[k];
        } else if (!strcmp(a, "--devices")) {
            devices_arg = v;
            o->n_devices = 0;
            const char *c = v;
            while (c && *c) {
                char *end;
                long d = strtol(c, &end, 10);
                if (end == c || d < 0 || d >= 64 || (*end && *end != ',') || o->n_devices == 64)
                    return bad(a, v, "expected a comma-separated list of device ordinals (0..63), one per stage");
                o->devices[o->n_devices++] = (int)d;
                c = *end ? end + 1 : end;
            }
            if (!v || !o->n_devices)
                return bad(a, v, "expected a comma-separated list of device ordinals, one per stage");
        } else {
            char msg[512];
            snprintf(msg, sizeof msg, "unknown option '%s'", a);
            return usage_error(msg);
        }
    }
    char msg[512];
    if (!o->model)
        return usage_error("no model given: -m MODEL.gguf is required");
    if (!o->n_prompts)
        return usage_error("no prompt given: -p TEXT is required");
    if (o->n_devices && o->n_devices != (o->stages < 2 ? 1 : o->stages)) {
        if (o->stages < 2)
            snprintf(msg, sizeof msg, "--devices %s: %d devices but one stage (--stages %d runs the whole model on "
                     "one device); give --stages %d to split the model over them", devices_arg, o->n_devices,
                     o->stages, o->n_devices);
        else
            snprintf(msg, sizeof msg, "--devices %s: %d devices for --stages %d; give one device per stage",
                     devices_arg, o->n_devices, o->stages);
        return usage_error(msg);
    }
    if (o->stages < 2)
        o->n_devices = 0; /* one stage: the primary device */
    if (o->spec && (o->temp != 0.0f || o->n_prompts > 1)) {
        snprintf(msg, sizeof msg, "--spec %d: speculative decoding needs --temp 0 and a single prompt (given: "
                 "--temp %g, %d prompt%s)", o->spec, (double)o->temp, o->n_prompts, o->n_prompts == 1 ? "" : "s");
        return usage_error(msg);
    }
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


/* Tokenize prompt i (wrapped as a user turn of the chat template, tmpl or else the model's, when asked) into *out
 * (malloc'd). */
static int tokenize_prompt(const memra_model *m, const char *prompt, int chat, const char *tmpl, int n_ctx,
                           memra_token **out, int *n_out)
{
    char *text = NULL;
    const char *src = prompt;
    int r;
    if (chat) {
        const memra_chat_message msg = {.role = "user", .content = prompt};
        size_t len = 0;
        r = memra_chat_apply(m, tmpl, &msg, 1, 1, NULL, 0, &len);
        if (r != MEMRA_OK && r != MEMRA_E_FULL)
            return r;
        if (!(text = malloc(len + 1)))
            return MEMRA_E_NOMEM;
        if ((r = memra_chat_apply(m, tmpl, &msg, 1, 1, text, len + 1, &len)) != MEMRA_OK) {
            free(text);
            return r;
        }
        src = text;
    }
    *out = malloc(sizeof **out * (size_t)n_ctx);
    r = *out ? memra_tokenize(m, src, (int)strlen(src), 1, chat, *out, n_ctx, n_out) : MEMRA_E_NOMEM;
    free(text);
    return r;
}

int main(int argc, char **argv)
{
    /* under mpirun: rank 0 is this program, every other rank serves its stages (docs/scale-out.md) */
    const int rank = memra_mpi_init(&argc, &argv);
    if (rank < 0) {
        fprintf(stderr, "memra-run: %s\n", memra_last_error());
        return 2;
    }
    if (rank > 0) {
        int sr = memra_mpi_serve();
        if (sr != MEMRA_OK)
            fprintf(stderr, "memra-run (rank %d): %s\n", rank, memra_last_error());
        memra_mpi_finish(sr);
        return sr != MEMRA_OK;
    }
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        memra_mpi_finish(MEMRA_OK);
        return rc == 1 ? 0 : rc;
    }

    catch_signals();
    memra_model *m = NULL;
    memra_runtime *rt = NULL;
    memra_token *prompts[RUN_MAX_PROMPTS] = {0};
    int n_prompt[RUN_MAX_PROMPTS] = {0};
    gen_out outs[RUN_MAX_PROMPTS];
    memset(outs, 0, sizeof outs);
    const char *why = NULL;
    char why_buf[640];
    rc = 1;
    if (!(m = memra_model_load(o.model, NULL))) {
        why = memra_last_error();
        goto out;
    }
    if (!memra_model_has_tokenizer(m)) {
        fprintf(stderr, "memra-run: %s has no tokenizer (tokenizer.ggml.* keys); memra-run needs one\n", o.model);
        goto out_quiet;
    }
    if (memra_model_n_ctx_train(m) > 0 && o.n_ctx > memra_model_n_ctx_train(m))
        o.n_ctx = memra_model_n_ctx_train(m);
    int tty = isatty(STDERR_FILENO);
    memra_runtime_params rp = memra_runtime_default_params();
    rp.stages = o.stages;
    rp.n_devices = o.stages > 1 ? o.n_devices : 0;
    memcpy(rp.devices, o.devices, sizeof rp.devices);
    rp.n_seq = o.n_prompts;
    rp.n_ctx = o.n_ctx;
    rp.kv_type = o.kv_type;
    rp.act_type = o.act_type;
    rp.max_rows = o.chunk > o.spec + 1 ? o.chunk : o.spec + 1;
    rp.progress = progress_bar;
    rp.progress_user = &tty;
    rp.abort_cb = stop_requested;
    if (o.n_prompts > 1)
        rp.overlap = 1; /* several sequences in flight: rotate the boundary slots (MEMRA_PP_OVERLAP wins) */
    if (!(rt = memra_runtime_create(m, &rp))) {
        fprintf(stderr, "memra-run: %s\n", memra_last_error());
        if (strstr(memra_last_error(), "door shut"))
            fprintf(stderr, "memra-run: a door is a MEMRA_* environment variable (docs/doors.md); door shut means "
                            "unset or off, the plain path: one stage, no pipeline\n");
        rc = memra_last_status() == MEMRA_E_INVAL ? 2 : 1;
        goto out_quiet;
    }
    if (o.trace && memra_runtime_trace_start(rt, o.trace) != MEMRA_OK) {
        fprintf(stderr, "memra-run: --trace %s: %s\n", o.trace, memra_runtime_last_error(rt));
        rc = 2;
        goto out_quiet;
    }
    for (int i = 0; i < o.n_prompts; i++) {
        int r = tokenize_prompt(m, o.prompt[i], o.chat, o.chat_template, o.n_ctx, &prompts[i], &n_prompt[i]);
        if (r == MEMRA_E_FULL || (r == MEMRA_OK && n_prompt[i] >= o.n_ctx)) {
            fprintf(stderr, "memra-run: prompt %d does not fit in --ctx-size %d\n", i + 1, o.n_ctx);
            goto out_quiet;
        }
        if (r != MEMRA_OK) {
            fprintf(stderr, "memra-run: prompt %d: %s\n", i + 1, memra_last_error()); /* "MEMRA_E_...: why" */
            goto out_quiet;
        }
        if (n_prompt[i] == 0) {
            fprintf(stderr, "memra-run: -p: prompt %d is empty after tokenization\n", i + 1);
            goto out_quiet;
        }
    }
    memra_sampler_params sp = memra_sampler_default_params();
    sp.temperature = o.temp;
    sp.top_k = o.top_k;
    sp.top_p = o.top_p;
    sp.min_p = o.min_p;
    sp.repeat_penalty = o.repeat_penalty;
    sp.seed = o.seed;
    gen_stats st = {0};
    int gr = MEMRA_OK;
    if (o.n_prompts == 1) { /* the prompt, then the streamed text (an answer starts on its own line) */
        fputs(o.prompt[0], stdout);
        fputs(o.chat ? "\n" : "", stdout);
        fflush(stdout);
    }
    if (o.n_predict > 0 && !g_signal)
        gr = gen_run(rt, m, prompts, n_prompt, o.n_prompts, o.n_predict, o.chunk, &sp, o.spec, o.n_prompts == 1, outs,
                     &st);
    if (o.n_prompts == 1)
        fputc('\n', stdout);
    fflush(stdout);
    if (g_signal) { /* the text so far is out; say why it stops there */
        fprintf(stderr, "memra-run: interrupted by %s after %d generated tokens\n",
                g_signal == SIGINT ? "SIGINT" : "SIGTERM", st.gen_tokens);
        rc = 128 + g_signal;
        goto out_quiet;
    }
    if (gr != MEMRA_OK) { /* name the prompt whose request failed, when one did */
        why = memra_runtime_last_error(rt);
        if (st.failed && snprintf(why_buf, sizeof why_buf, "prompt %d: %s", st.failed, why) > 0)
            why = why_buf;
        goto out;
    }
    for (int i = 0; i < o.n_prompts; i++)
        if (outs[i].ctx_full)
            fprintf(stderr, "memra-run: prompt %d: the context (--ctx-size %d) filled after %d generated tokens; its "
                            "generation ends there\n", i + 1, o.n_ctx, outs[i].n_tokens);
    if (o.n_predict > 0) {
        fprintf(stderr, "memra-run: %d stage(s), %d sequence(s): %d prompt + %d generated tokens in %.2f s\n",
                memra_runtime_n_stages(rt), o.n_prompts, st.prompt_tokens, st.gen_tokens, st.seconds);
        if (o.n_prompts > 1) /* the sequences' prompts and decoding interleave: no split */
            fprintf(stderr, "memra-run: prompts and generation overlap across sequences: %.1f generated tok/s over "
                            "the whole run\n", st.gen_tokens / st.seconds);
        else if (st.first_s > 0.0) {
            /* the prompt's phase ends with the first generated token (it comes from the prompt's logits) */
            double gen_s = st.seconds - st.first_s;
            fprintf(stderr, "memra-run: prompt:     %d tokens in %.2f s (%.1f tok/s, up to the first generated token)\n",
                    st.prompt_tokens, st.first_s, st.prompt_tokens / st.first_s);
            if (st.gen_tokens > 1 && gen_s > 0.0)
                fprintf(stderr, "memra-run: generation: %d tokens in %.2f s (%.1f generated tok/s, after the first)\n",
                        st.gen_tokens - 1, gen_s, (st.gen_tokens - 1) / gen_s);
        }
        if (o.spec)
            fprintf(stderr, "memra-run: speculative: %d verify steps, %d drafted, %d accepted (%.0f%%), %.2f tokens "
                            "per step\n",
                    st.steps, st.drafted, st.accepted, st.drafted ? 100.0 * st.accepted / st.drafted : 0.0,
                    st.steps ? (double)(st.gen_tokens - 1) / st.steps : 0.0);
    }
    rc = 0;
    if (o.trace && memra_runtime_trace_stop(rt) != MEMRA_OK) {
        why = memra_runtime_last_error(rt);
        rc = 1;
        goto out;
    }
    if (o.trace)
        fprintf(stderr, "memra-run: trace written to %s (memra-trace summary %s)\n", o.trace, o.trace);
    goto out_quiet;
out:
    fprintf(stderr, "memra-run: %s\n", why && why[0] ? why : "failed");
out_quiet:
    for (int i = 0; i < RUN_MAX_PROMPTS; i++) {
        free(prompts[i]);
        free(outs[i].text);
    }
    memra_runtime_free(rt);
    memra_model_free(m);
    memra_mpi_finish(rc); /* a failure ends every rank with its status */
    return rc;
}
