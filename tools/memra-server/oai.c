/* OpenAI request parsing and response JSON, all through cJSON. Unknown fields are ignored (as the OpenAI API
 * does); a known field of the wrong type or out of range is a 400 that names it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "srv.h"

static int fail(srv_err *e, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = status;
    if (param) {
        snprintf(e->param_buf, sizeof e->param_buf, "%s", param);
        e->param = e->param_buf;
    } else {
        e->param = NULL;
    }
    return -1;
}

/* Present and not null. */
static cJSON *field(const cJSON *o, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer field in [lo, hi]; absent or null leaves *out. */
static int get_int(const cJSON *o, const char *key, double lo, double hi, int64_t *out, srv_err *e)
{
    cJSON *v = field(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
        return fail(e, 400, key, "'%s' must be an integer in [%.0f, %.0f]", key, lo, hi);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(e, 400, key, "'%s' is %.17g: it must be an integer in [%.0f, %.0f]", key, v->valuedouble, lo, hi);
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* A number field in [lo, hi]; absent or null leaves *out. */
static int get_num(const cJSON *o, const char *key, double lo, double hi, float *out, srv_err *e)
{
    cJSON *v = field(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(e, 400, key, "'%s' must be a number in [%g, %g]", key, lo, hi);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(e, 400, key, "'%s' is %g: it must be in [%g, %g]", key, v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int *out, srv_err *e)
{
    cJSON *v = field(o, key);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return fail(e, 400, key, "'%s' must be a boolean (true or false)", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int add_stop(srv_req *r, const char *s, srv_err *e)
{
    size_t n = strlen(s);
    if (n == 0 || n > SRV_STOP_MAX_LEN)
        return fail(e, 400, "stop", "'stop': each stop sequence must be 1..%d bytes (one is %zu)", SRV_STOP_MAX_LEN, n);
    if (r->n_stop == SRV_MAX_STOP)
        return fail(e, 400, "stop", "'stop': at most %d stop sequences", SRV_MAX_STOP);
    if (!(r->stop[r->n_stop] = strdup(s)))
        return fail(e, 500, NULL, "out of memory");
    r->n_stop++;
    if (n > r->stop_max)
        r->stop_max = n;
    return 0;
}

static int parse_stop(const cJSON *root, srv_req *r, srv_err *e)
{
    cJSON *v = field(root, "stop");
    if (!v)
        return 0;
    if (cJSON_IsString(v))
        return add_stop(r, v->valuestring, e);
    if (!cJSON_IsArray(v))
        return fail(e, 400, "stop", "'stop' must be a string or an array of at most %d strings", SRV_MAX_STOP);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it))
            return fail(e, 400, "stop", "'stop' must be a string or an array of at most %d strings", SRV_MAX_STOP);
        if (add_stop(r, it->valuestring, e))
            return -1;
    }
    return 0;
}

/* Tokenize text into r->prompt; a prompt that leaves no room in the context is a 400 with the counts. */
static int tokenize(srv_app *app, const char *text, size_t len, int parse_special, const char *param, srv_req *r,
                    srv_err *e)
{
    const int n_ctx = memra_runtime_n_ctx(app->rt);
    if (len > (size_t)SRV_BODY_MAX * 4)
        return fail(e, 400, param, "'%s' is too long (%zu bytes)", param, len);
    if (!(r->prompt = malloc(sizeof(memra_token) * (size_t)(n_ctx + 1))))
        return fail(e, 500, NULL, "out of memory");
    int n = 0;
    int rc = memra_tokenize(app->model, text, (int)len, 1, parse_special, r->prompt, n_ctx, &n);
    if (rc == MEMRA_E_FULL) {
        int total = 0;
        if (memra_tokenize(app->model, text, (int)len, 1, parse_special, NULL, 0, &total) != MEMRA_OK)
            total = n;
        return fail(e, 400, param, "'%s' is %d tokens: the context holds %d tokens, and at least one must be "
                    "left for the completion", param, total, n_ctx);
    }
    if (rc != MEMRA_OK)
        return fail(e, 400, param, "'%s' could not be tokenized: %s", param, memra_last_error());
    if (n >= n_ctx)
        return fail(e, 400, param, "'%s' is %d tokens: the context holds %d tokens, and at least one must be left "
                    "for the completion", param, n, n_ctx);
    if (n < 1)
        return fail(e, 400, param, "'%s' is empty: it must hold at least one token", param);
    r->n_prompt = n;
    return 0;
}

static int parse_prompt(srv_app *app, const cJSON *root, srv_req *r, srv_err *e)
{
    cJSON *v = field(root, "prompt");
    const char *msg = "'prompt' must be a string, an array of one string, or an array of token ids";
    if (!v)
        return fail(e, 400, "prompt", "'prompt' is required (a string)");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(cJSON_GetArrayItem(v, 0)))
        v = cJSON_GetArrayItem(v, 0);
    if (cJSON_IsString(v))
        return tokenize(app, v->valuestring, strlen(v->valuestring), 0, "prompt", r, e);
    if (!cJSON_IsArray(v))
        return fail(e, 400, "prompt", "%s", msg);
    const int n_ctx = memra_runtime_n_ctx(app->rt), n_vocab = memra_model_n_vocab(app->model);
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return fail(e, 400, "prompt", "%s (the array is empty)", msg);
    if (n >= n_ctx)
        return fail(e, 400, "prompt", "'prompt' is %d tokens: the context holds %d tokens, and at least one must be "
                    "left for the completion", n, n_ctx);
    if (!(r->prompt = malloc(sizeof(memra_token) * (size_t)n)))
        return fail(e, 500, NULL, "out of memory");
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, v) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!cJSON_IsNumber(it) || floor(d) != d || d < 0 || d >= n_vocab)
            return fail(e, 400, "prompt", "%s; prompt[%d] is not a token id in [0, %d)", msg, i, n_vocab);
        r->prompt[i++] = (memra_token)d;
    }
    r->n_prompt = n;
    return 0;
}

/* Text of a message's content: a string, or an array of {"type":"text","text":...} parts (joined). */
static char *content_text(const cJSON *c, int i, srv_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (cJSON_IsString(c))
        return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        fail(e, 400, param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    size_t len = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsObject(p) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(t)) {
            fail(e, 400, param, "'%s': each part must be {\"type\": \"text\", \"text\": string} (only text is "
                 "supported)", param);
            return NULL;
        }
        len += strlen(t->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) {
        fail(e, 500, NULL, "out of memory");
        return NULL;
    }
    size_t at = 0;
    cJSON_ArrayForEach(p, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(s + at, t, n);
        at += n;
    }
    s[at] = 0;
    return s;
}

static int parse_messages(srv_app *app, const cJSON *root, srv_req *r, srv_err *e)
{
    cJSON *v = field(root, "messages");
    memra_chat_message *msgs = NULL;
    char *text = NULL;
    int n = 0, rc = -1;
    if (!v || !cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return fail(e, 400, "messages", "'messages' is required: a non-empty array of {\"role\", \"content\"}");
    int cnt = cJSON_GetArraySize(v);
    if (!(msgs = calloc((size_t)cnt, sizeof *msgs))) {
        fail(e, 500, NULL, "out of memory");
        goto fail;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", n);
        if (!cJSON_IsObject(it)) {
            fail(e, 400, param, "'%s' must be an object {\"role\", \"content\"}", param);
            goto fail;
        }
        cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        cJSON *content = field(it, "content");
        if (!cJSON_IsString(role)) {
            snprintf(param, sizeof param, "messages[%d].role", n);
            fail(e, 400, param, "'%s' must be a string (\"system\", \"user\" or \"assistant\")", param);
            goto fail;
        }
        if (!content) {
            snprintf(param, sizeof param, "messages[%d].content", n);
            fail(e, 400, param, "'%s' is required (a string)", param);
            goto fail;
        }
        msgs[n].role = role->valuestring;
        if (!(msgs[n].content = content_text(content, n, e)))
            goto fail;
        n++;
    }
    size_t need = 0;
    int ar = memra_chat_apply(app->model, app->opt.chat_template, msgs, (size_t)n, 1, NULL, 0, &need);
    if (ar == MEMRA_E_FULL || ar == MEMRA_OK) {
        if (!(text = malloc(need + 1))) {
            fail(e, 500, NULL, "out of memory");
            goto fail;
        }
        ar = memra_chat_apply(app->model, app->opt.chat_template, msgs, (size_t)n, 1, text, need + 1, &need);
    }
    if (ar != MEMRA_OK) {
        fail(e, 400, "messages", "the chat template cannot render 'messages': %s", memra_last_error());
        goto fail;
    }
    rc = tokenize(app, text, need, 1, "messages", r, e);
fail:
    for (int i = 0; i < n; i++)
        free((void *)msgs[i].content);
    free(msgs);
    free(text);
    return rc;
}

static size_t utf8_len(const unsigned char *s, size_t n);

int oai_parse(srv_app *app, int ep, const char *body, size_t len, srv_req *r, srv_err *e)
{
    const char *end = NULL;
    int rc = -1;
    for (size_t i = 0; i < len;) { /* JSON text is UTF-8 (RFC 8259) */
        size_t k = utf8_len((const unsigned char *)body + i, len - i);
        if (!k)
            return fail(e, 400, NULL, "the request body is not valid UTF-8 (byte %zu of %zu)", i, len);
        i += k;
    }
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : len;
        return fail(e, 400, NULL, "the request body is not valid JSON (error near byte %zu of %zu)", off, len);
    }
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            fail(e, 400, NULL, "the request body is not valid JSON: text after the object at byte %zu",
                 (size_t)(p - body));
            goto fail;
        }
    if (!cJSON_IsObject(root)) {
        fail(e, 400, NULL, "the request body must be a JSON object");
        goto fail;
    }
    int64_t n = 1, max_tokens = -1, top_k = 0, seed = -1, mct = -1;
    memra_sampler_params sp = memra_sampler_default_params();
    sp.temperature = 1.0f; /* OpenAI's defaults: plain sampling at temperature 1 */
    sp.top_p = 1.0f;
    sp.top_k = 0;
    sp.min_p = 0.0f;
    if (get_int(root, "n", 1, 128, &n, e) || get_int(root, "max_tokens", 0, 2147483647.0, &max_tokens, e) ||
        get_int(root, "max_completion_tokens", 0, 2147483647.0, &mct, e) ||
        get_num(root, "temperature", 0, 2, &sp.temperature, e) || get_num(root, "top_p", 0, 1, &sp.top_p, e) ||
        get_int(root, "top_k", 0, 1 << 30, &top_k, e) ||
        get_int(root, "seed", -9223372036854775808.0, 9223372036854775807.0, &seed, e) ||
        get_bool(root, "stream", &r->stream, e) || parse_stop(root, r, e))
        goto fail;
    if (n != 1) {
        fail(e, 400, "n", "'n' is %lld: only n = 1 is supported", (long long)n);
        goto fail;
    }
    if (sp.top_p <= 0) {
        fail(e, 400, "top_p", "'top_p' must be in (0, 1]");
        goto fail;
    }
    cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) {
        fail(e, 400, "stream_options", "'stream_options' must be an object");
        goto fail;
    }
    if (so && get_bool(so, "include_usage", &r->include_usage, e)) {
        snprintf(e->param_buf, sizeof e->param_buf, "stream_options.include_usage");
        goto fail;
    }
    if (ep == SRV_EP_CHAT ? parse_messages(app, root, r, e) : parse_prompt(app, root, r, e))
        goto fail;
    if (mct >= 0)
        max_tokens = mct;
    const int room = memra_runtime_n_ctx(app->rt) - r->n_prompt;
    if (max_tokens < 0) /* OpenAI's defaults: 16 for completions, the rest of the context for chat */
        max_tokens = ep == SRV_EP_CHAT ? room : 16;
    r->max_tokens = (int)(max_tokens < room ? max_tokens : room);
    sp.top_k = (int32_t)top_k;
    if (field(root, "seed"))
        sp.seed = (uint64_t)seed;
    else /* no seed: a different stream per request */
        sp.seed = (uint64_t)(srv_now() * 1e9) ^ (atomic_fetch_add(&app->next_rid, 1) * 0x9E3779B97F4A7C15ull);
    r->rq.prompt = r->prompt;
    r->rq.n_prompt = r->n_prompt;
    r->rq.n_predict = r->max_tokens;
    r->rq.sampling = sp;
    r->rq.stop_at_eog = 1;
    rc = 0;
fail:
    cJSON_Delete(root);
    return rc;
}

/* Bytes of a valid UTF-8 sequence at s (n left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!k || k > n || (k == 2 && c < 0xC2) || (k == 4 && c > 0xF4))
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (k == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)))
        return 0;
    if (k == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90)))
        return 0;
    return k;
}

cJSON *oai_string(const char *s, size_t len)
{
    char *buf = malloc(len * 3 + 1), *o = buf;
    if (!buf)
        return NULL;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_len((const unsigned char *)s + i, len - i);
        if (k && !(k == 1 && s[i] == 0)) {
            memcpy(o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    *o = 0;
    cJSON *j = cJSON_CreateString(buf);
    free(buf);
    return j;
}

char *oai_error_json(int status, const char *msg, const char *param)
{
    const char *type = status == 401 ? "authentication_error" : status == 429 ? "rate_limit_error"
                       : status >= 500 ? "server_error" : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    char *s = NULL;
    if (err && cJSON_AddItemToObject(err, "message", oai_string(msg, strlen(msg))) &&
        cJSON_AddStringToObject(err, "type", type) &&
        (param ? cJSON_AddStringToObject(err, "param", param) : cJSON_AddNullToObject(err, "param")) &&
        cJSON_AddNullToObject(err, "code"))
        s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

const char *oai_finish_reason(const srv_req *r)
{
    return !r->stopped && r->n_tokens >= r->max_tokens ? "length" : "stop";
}

static cJSON *usage_json(const srv_req *r)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_tokens);
    return u;
}

static cJSON *head(srv_app *app, const srv_req *r, const char *object)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", r->rid);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)r->created);
    cJSON_AddStringToObject(root, "model", app->model_name);
    return root;
}

char *oai_response_json(srv_app *app, srv_req *r)
{
    const int chat = r->ep == SRV_EP_CHAT;
    cJSON *root = head(app, r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddItemToObject(msg, "content", oai_string(r->text ? r->text : "", r->len));
    } else {
        cJSON_AddItemToObject(c, "text", oai_string(r->text ? r->text : "", r->len));
    }
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", oai_finish_reason(r));
    cJSON_AddItemToObject(root, "usage", usage_json(r));
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

char *oai_chunk(srv_app *app, srv_req *r, const char *delta, size_t len, const char *finish, int role, int usage)
{
    const int chat = r->ep == SRV_EP_CHAT;
    cJSON *root = head(app, r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    if (!usage) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", 0);
        if (chat) {
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            if (role)
                cJSON_AddStringToObject(d, "role", "assistant");
            if (delta)
                cJSON_AddItemToObject(d, "content", oai_string(delta, len));
        } else {
            cJSON_AddItemToObject(c, "text", oai_string(delta ? delta : "", delta ? len : 0));
        }
        cJSON_AddNullToObject(c, "logprobs");
        if (finish)
            cJSON_AddStringToObject(c, "finish_reason", finish);
        else
            cJSON_AddNullToObject(c, "finish_reason");
    } else {
        cJSON_AddItemToObject(root, "usage", usage_json(r));
    }
    char *js = cJSON_PrintUnformatted(root), *s = NULL;
    cJSON_Delete(root);
    if (js && (s = malloc(strlen(js) + 9)))
        sprintf(s, "data: %s\n\n", js);
    free(js);
    return s;
}
