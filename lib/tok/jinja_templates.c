/* Built-in chat templates for families whose tokenizer_config.json has none, and tok_chat_render. */
#include <string.h>

#include "tok/jinja_int.h"

/* ------------------------------------------------------------------------------------------------ */
/* built-in templates for families whose tokenizer_config.json has none                              */

static const char tpl_chatml[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char tpl_llama3[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

/* Llama-2-chat: the system prompt is folded into the first user turn inside <<SYS>>, and that turn is
 * trimmed as a whole (Meta's template: content.strip() of the joined text, so the system prompt keeps
 * its own spaces) */
static const char tpl_llama2[] =
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{{- bos_token + '[INST] ' + ((system if loop.first else '') + message['content']) | trim + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

/* Mistral-Instruct: [INST] turns; a system message is prepended to the first user turn */
static const char tpl_mistral[] =
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{{- '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- message['content'] + eos_token }}"
    "{%- endif %}"
    "{%- endfor %}";

static const char tpl_phi3[] =
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}";

/* Gemma (2): turns between <start_of_turn> and <end_of_turn>, the assistant's role called "model",
 * contents trimmed; no system role, and user / model turns must alternate (both refused by name) */
static const char tpl_gemma[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{- raise_exception('System role not supported') }}{%- endif %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{{- message['content'] | trim }}{{- '<end_of_turn>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\n' }}{%- endif %}";

/* ChatGLM3: the template of THUDM/chatglm3-6b's tokenizer_config.json (its packs carry it; older exports
 * lack it). The space after each role's newline is what the model was trained on: ChatGLM's own
 * build_chat_input encodes "\n" and the content as separate SentencePiece calls, each with its dummy
 * prefix, which is what tokenizing the sections of this text gives (tok_spm_json). */
static const char tpl_chatglm[] =
    "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ message['content'] }}"
    "{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

const char *tok_builtin_template(const char *family)
{
    if (!family)
        return NULL;
    if (!strcmp(family, "chatml") || !strcmp(family, "qwen2") || !strcmp(family, "qwen3"))
        return tpl_chatml;
    if (!strcmp(family, "llama3"))
        return tpl_llama3;
    if (!strcmp(family, "llama2") || !strcmp(family, "llama"))
        return tpl_llama2;
    if (!strcmp(family, "mistral"))
        return tpl_mistral;
    if (!strcmp(family, "phi3"))
        return tpl_phi3;
    if (!strcmp(family, "gemma2") || !strcmp(family, "gemma"))
        return tpl_gemma;
    if (!strcmp(family, "chatglm"))
        return tpl_chatglm;
    return NULL;
}

const char *tok_chat_template_for(const tok *t, const char *family)
{
    if (t && tok_chat_template(t))
        return tok_chat_template(t);
    if (family && !strcmp(family, "llama") && t && tok_token_to_id(t, "<|start_header_id|>", 19) >= 0)
        family = "llama3";
    return tok_builtin_template(family);
}

char *tok_chat_render(const tok *t, const char *family, const json_t *vars, size_t *len, ogk_error *e)
{
    const json_t *tools = json_is_object(vars) ? json_object_get(vars, "tools") : NULL;
    const char *src = t && tools && !json_is_null(tools) && tok_chat_template_tools(t) ? tok_chat_template_tools(t)
                                                                                      : tok_chat_template_for(t, family);
    if (!src) {
        ogk_fail(e, "no chat template: the tokenizer has none and there is no built-in one for family '%s'",
                 family ? family : "(unknown)");
        return NULL;
    }
    json_t *v = json_is_object(vars) ? json_copy((json_t *)vars) : json_object();
    if (t) {
        if (!json_object_get(v, "bos_token") && tok_bos_token(t))
            json_object_set_new(v, "bos_token", json_string(tok_bos_token(t)));
        if (!json_object_get(v, "eos_token") && tok_eos_token(t))
            json_object_set_new(v, "eos_token", json_string(tok_eos_token(t)));
    }
    char *r = tok_jinja_render(src, v, len, e);
    json_decref(v);
    return r;
}

