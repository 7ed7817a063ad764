/* Chat template detection and rendering (see chat.h). No shared mutable state. */
#include "model/chat.h"

#include <stdlib.h>
#include <string.h>

struct mdl_chat {
    mdl_chat_kind kind;
    char *default_system; /* chatml: the system prompt the template inserts, or NULL */
};

const char *mdl_chat_kind_name(mdl_chat_kind k)
{
    switch (k) {
    case MDL_CHAT_CHATML: return "chatml";
    case MDL_CHAT_LLAMA3: return "llama3";
    case MDL_CHAT_GEMMA: return "gemma";
    default: return "unknown";
    }
}

/* The first literal default system prompt in a chatml template: text right after
 * "<|im_start|>system" + newline (a real one or the Jinja escape \n) up to "<|im_end|>", when that text is
 * a plain string (no Jinja expression or quote in it). Jinja \n and \' escapes are undone. */
static char *find_default_system(const char *tmpl)
{
    static const char head[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
        const char *s = p + sizeof head - 1;
        if (s[0] == '\n')
            s += 1;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e)
            return NULL;
        int literal = e > s;
        for (const char *q = s; q < e && literal; q++)
            if (*q == '{' || *q == '}' || *q == '\'' || *q == '"')
                literal = q > s && q[-1] == '\\' && *q == '\''; /* an escaped quote stays literal */
        if (!literal)
            continue;
        char *out = malloc((size_t)(e - s) + 1);
        if (!out)
            return NULL;
        size_t w = 0;
        for (const char *q = s; q < e; q++) {
            if (q[0] == '\\' && q + 1 < e && (q[1] == 'n' || q[1] == '\'' || q[1] == '\\')) {
                out[w++] = q[1] == 'n' ? '\n' : q[1];
                q++;
            } else {
                out[w++] = *q;
            }
        }
        out[w] = '\0';
        return out;
    }
    return NULL;
}

mdl_chat *mdl_chat_create(const char *tmpl, dev_err *err)
{
    if (!tmpl) {
        dev_err_set(err, MEMRA_E_INVAL, "chat template: none given (tokenizer.chat_template absent); "
                                        "supported formats: chatml, llama3, gemma");
        return NULL;
    }
    mdl_chat_kind k = 0;
    if (strcmp(tmpl, "chatml") == 0 || strstr(tmpl, "<|im_start|>"))
        k = MDL_CHAT_CHATML;
    else if (strcmp(tmpl, "llama3") == 0 || strstr(tmpl, "<|start_header_id|>"))
        k = MDL_CHAT_LLAMA3;
    else if (strcmp(tmpl, "gemma") == 0 || strstr(tmpl, "<start_of_turn>"))
        k = MDL_CHAT_GEMMA;
    if (!k) {
        dev_err_set(err, MEMRA_E_UNSUPPORTED,
                    "chat template not recognised (%.60s%s); supported formats: chatml (<|im_start|>), "
                    "llama3 (<|start_header_id|>), gemma (<start_of_turn>)",
                    tmpl, strlen(tmpl) > 60 ? "..." : "");
        return NULL;
    }
    mdl_chat *c = calloc(1, sizeof *c);
    if (!c) {
        dev_err_set(err, MEMRA_E_NOMEM, "chat template");
        return NULL;
    }
    c->kind = k;
    if (k == MDL_CHAT_CHATML)
        c->default_system = find_default_system(tmpl);
    return c;
}

void mdl_chat_destroy(mdl_chat *c)
{
    if (c) {
        free(c->default_system);
        free(c);
    }
}

mdl_chat_kind mdl_chat_kind_of(const mdl_chat *c) { return c->kind; }
const char *mdl_chat_default_system(const mdl_chat *c) { return c->default_system; }

/* Output with the snprintf-like contract: bytes beyond cap-1 are counted, not written. */
typedef struct sbuf {
    char *p;
    size_t cap, n;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, b->n++)
        if (b->n + 1 < b->cap)
            b->p[b->n] = s[i];
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Jinja's `| trim` (ASCII whitespace). */
static void put_trimmed(sbuf *b, const char *s)
{
    size_t n = strlen(s), i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    while (n > i && is_ws(s[n - 1]))
        n--;
    put(b, s + i, n - i);
}

long mdl_chat_apply(const mdl_chat *c, const mdl_chat_msg *msgs, size_t n, int add_generation_prompt,
                    char *buf, size_t cap)
{
    if (!c || (!msgs && n) || (!buf && cap))
        return MEMRA_E_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return MEMRA_E_INVAL;
    sbuf b = {buf, cap, 0};
    switch (c->kind) {
    case MDL_CHAT_CHATML:
        if (c->default_system && n > 0 && strcmp(msgs[0].role, "system") != 0) {
            puts_(&b, "<|im_start|>system\n");
            puts_(&b, c->default_system);
            puts_(&b, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n; i++) {
            puts_(&b, "<|im_start|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt)
            puts_(&b, "<|im_start|>assistant\n");
        break;
    case MDL_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            puts_(&b, "<|start_header_id|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content);
            puts_(&b, "<|eot_id|>");
        }
        if (add_generation_prompt)
            puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case MDL_CHAT_GEMMA: {
        const char *pending_system = NULL;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(msgs[i].role, "system") == 0) {
                pending_system = msgs[i].content;
                continue;
            }
            int model = strcmp(msgs[i].role, "assistant") == 0;
            puts_(&b, "<start_of_turn>");
            puts_(&b, model ? "model" : msgs[i].role);
            puts_(&b, "\n");
            if (pending_system && !model) {
                put_trimmed(&b, pending_system);
                puts_(&b, "\n\n");
                pending_system = NULL;
            }
            put_trimmed(&b, msgs[i].content);
            puts_(&b, "<end_of_turn>\n");
        }
        if (add_generation_prompt)
            puts_(&b, "<start_of_turn>model\n");
        break;
    }
    }
    if (cap)
        buf[b.n < cap ? b.n : cap - 1] = '\0';
    return b.n < cap ? (long)b.n : -(long)(b.n + 1);
}
