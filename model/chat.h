/* Chat templates: turn a list of (role, content) messages into the prompt text a model was trained on.
 * A GGUF carries its template as Jinja text (tokenizer.chat_template); we do not run Jinja. We detect
 * which known format the text is and render that format in C, matching HF apply_chat_template output
 * byte for byte for the supported formats (tested against HF for SmolLM2). Supported:
 *   chatml  <|im_start|>role\ncontent<|im_end|>\n ... ; gen prompt "<|im_start|>assistant\n".
 *           When the template writes a default system prompt for conversations without one (SmolLM2,
 *           Qwen2.5), that text is read out of the template and inserted the same way.
 *   llama3  <|start_header_id|>role<|end_header_id|>\n\ncontent(trimmed)<|eot_id|> ; gen prompt
 *           "<|start_header_id|>assistant<|end_header_id|>\n\n". The template's leading bos_token is
 *           NOT written: the tokenizer adds BOS (as llama.cpp does).
 *   gemma   <start_of_turn>user\ncontent<end_of_turn>\n ; "assistant" is written "model", a system
 *           message is prefixed to the first user turn; gen prompt "<start_of_turn>model\n".
 * Anything else is refused with an error naming what is supported. */
#ifndef MDL_CHAT_H
#define MDL_CHAT_H

#include <stddef.h>
#include "device/err.h"

typedef enum mdl_chat_kind {
    MDL_CHAT_CHATML = 1,
    MDL_CHAT_LLAMA3 = 2,
    MDL_CHAT_GEMMA = 3,
} mdl_chat_kind;

typedef struct mdl_chat_msg {
    const char *role;    /* "system", "user", "assistant" (other roles are written as given) */
    const char *content; /* NUL-terminated UTF-8 */
} mdl_chat_msg;

typedef struct mdl_chat mdl_chat; /* an immutable, detected template; thread-safe to share */

/* Detect the format of template text tmpl (or name: "chatml", "llama3", "gemma"). NULL + err
 * (MEMRA_E_UNSUPPORTED, listing the supported formats) when it is none of them. */
mdl_chat *mdl_chat_create(const char *tmpl, dev_err *err);
void mdl_chat_destroy(mdl_chat *c);

mdl_chat_kind mdl_chat_kind_of(const mdl_chat *c);
const char *mdl_chat_kind_name(mdl_chat_kind k);
/* The default system prompt the template inserts when the conversation has none, or NULL. */
const char *mdl_chat_default_system(const mdl_chat *c);

/* Render n messages (+ the assistant turn opener when add_generation_prompt) into buf, NUL-terminated.
 * Returns the length (without NUL) when it fits in cap-1; -(length+1) when cap is too small;
 * MEMRA_E_INVAL for bad arguments (NULL role/content). Tokenize the result with parse_special = 1. */
long mdl_chat_apply(const mdl_chat *c, const mdl_chat_msg *msgs, size_t n, int add_generation_prompt,
                    char *buf, size_t cap);

#endif
