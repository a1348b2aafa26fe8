/* lib/tok — Hugging Face tokenizers and chat templates, identical to the reference implementations.
 *
 * Owns: loading tokenizer.json (BPE model, normalizers, pre-tokenizers, added/special tokens, post-processor,
 * decoders) and tokenizer_config.json (special tokens, chat_template), encode, decode, an incremental
 * UTF-8-safe decoder for streaming, Unicode normalization (NFC/NFD/NFKC/NFKD through utf8proc),
 * and a Jinja-subset interpreter for chat templates with built-in templates for families whose packs ship
 * none. Must not know about model weights or containers (the caller hands it bytes or a directory).
 *
 * Semantics follow @huggingface/tokenizers (JS) and @huggingface/jinja, which the tests use as oracles:
 *  - added tokens are matched longest-first, left to right, before normalization (normalized=false) and
 *    after it (normalized=true); lstrip/rstrip trim whitespace around them;
 *  - the normalizer and pre-tokenizer run per section between added tokens;
 *  - BPE merges by rank (lowest first, leftmost on ties) with a heap; byte_fallback emits <0xXX>;
 *  - input text must be valid UTF-8: anything else is refused by name (tok_encode returns -1), never
 *    guessed at. Decoded bytes that are not valid UTF-8 become U+FFFD per the WHATWG decoder, as the
 *    reference does.
 *  - Split regexes (Oniguruma syntax) are translated to PCRE2 (UTF + UCP, JIT) with the reference's
 *    meanings: \s = White_Space, \d = Nd, \w = the Oniguruma word set, '.' excludes only \n, ^/$ are
 *    \n line anchors, (?i:...) folds ASCII only, a '+' after a quantifier is dropped. Split behaviors
 *    other than Removed act as Isolated, and Metaspace ignores "split", as in the reference.
 *  - Supported: model BPE; normalizers NFC NFD NFKC NFKD Replace Prepend Strip Sequence, Precompiled (a
 *    SentencePiece character map, applied as SentencePiece does: the longest rule at each byte); pre-tokenizers
 *    Split ByteLevel Metaspace Digits Whitespace WhitespaceSplit Sequence; post-processors
 *    TemplateProcessing ByteLevel; decoders ByteLevel Metaspace ByteFallback Fuse Strip Replace Sequence.
 *    Anything else is refused at load time by name ("unsupported normalizer type 'Lowercase'").
 *  - A tok object is not thread-safe (BPE cache, regex match data and work arrays are per object): use
 *    one per thread, or serialise calls. tok_load is ~0.1 s of CPU for the 11 MB Qwen tokenizer.json. */
#ifndef OGK_TOK_H
#define OGK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

typedef struct tok tok;

/* Load from memory: tokenizer.json (required) and tokenizer_config.json (may be NULL). */
tok *tok_load(const char *json, size_t len, const char *config, size_t config_len, ogk_error *e);
/* Load DIR/tokenizer.json (or, when there is none, DIR/tokenizer.model through tok_spm_json) and
 * DIR/tokenizer_config.json (optional). */
tok *tok_load_dir(const char *dir, ogk_error *e);
void tok_free(tok *t);
/* A SentencePiece model (tokenizer.model bytes) as tokenizer.json text that encodes and decodes as
 * SentencePiece does, for packs that ship no tokenizer.json (ChatGLM3; older Llama exports). BPE models,
 * with their normalizer: the precompiled character map (nmt_nfkc, nmt_nfkc_cf, ...; none for identity),
 * the dummy prefix, extra-space removal and space escaping as the model says; byte fallback or <unk>.
 * Unigram / word / char models, treat_whitespace_as_suffix and unused pieces are refused by name. As transformers' converted tokenizers:
 * control and unknown pieces are special added tokens, user-defined pieces added tokens; the normalizer
 * (so the dummy prefix) runs per section between added tokens. config (tokenizer_config.json, may be
 * NULL): add_bos_token / add_eos_token (BOS by default), added_tokens_decoder, and tokenizer_class
 * "ChatGLMTokenizer": the nine tokens tokenization_chatglm.py appends after the pieces ([MASK] [gMASK]
 * [sMASK] sop eop <|system|> <|user|> <|assistant|> <|observation|>) and its [gMASK] sop prefix.
 * Returns malloc'd JSON (*out_len bytes, NUL-terminated) or NULL with e filled. */
char *tok_spm_json(const void *model, size_t n, const char *config, size_t config_len, size_t *out_len, ogk_error *e);

/* Encode text (len bytes, valid UTF-8). add_special: apply the post-processor's special tokens (e.g. BOS).
 * *ids is malloc'd (caller frees). Returns 0, or -1 with e filled (invalid UTF-8, out of memory). */
int tok_encode(tok *t, const char *text, size_t len, int add_special, int32_t **ids, size_t *n, ogk_error *e);
/* The same, giving up as soon as the ids would number more than max_ids ("more than N tokens"): a prompt
 * that cannot fit a context is refused without encoding all of it. */
int tok_encode_max(tok *t, const char *text, size_t len, int add_special, size_t max_ids, int32_t **ids, size_t *n,
                   ogk_error *e);
/* Decode ids to a malloc'd NUL-terminated string (length in *len). skip_special drops special tokens.
 * cleanup: -1 = as tokenizer_config.json says (clean_up_tokenization_spaces, default true), 0 / 1 = force.
 * Unknown ids are an error. */
char *tok_decode(tok *t, const int32_t *ids, size_t n, int skip_special, int cleanup, size_t *len, ogk_error *e);

/* Incremental decoder for streaming: feed ids one at a time; each call returns the new text (possibly
 * empty, never a broken UTF-8 sequence; valid until the next call). tok_stream_flush returns what is
 * held back at the end. Concatenating all outputs gives tok_decode(ids, cleanup=0) -- for every decoder
 * except a Strip that removes more than one leading character (start > 1) or any trailing ones (stop > 0):
 * each step decodes a window that starts one token back, and such a Strip cuts the window's edges where
 * the whole text has none (no released tokenizer uses one; Llama/Mistral's is start 1, stop 0). */
typedef struct tok_stream tok_stream;
/* flags: TOK_STREAM_SKIP_SPECIAL drops special tokens; TOK_STREAM_SKIP_UNKNOWN gives ids the tokenizer
 * lacks no text instead of an error (a model's padded classifier rows past the tokenizer, e.g. Qwen2.5's
 * 151936 against 151665 or Phi-3's 32064 against 32000: generation can pick them, as transformers'
 * decode skips them) */
enum { TOK_STREAM_SKIP_SPECIAL = 1, TOK_STREAM_SKIP_UNKNOWN = 2 };
tok_stream *tok_stream_new(tok *t, int flags);
const char *tok_stream_put(tok_stream *s, int32_t id, size_t *len, ogk_error *e);
const char *tok_stream_flush(tok_stream *s, size_t *len, ogk_error *e);
/* The bytes token id adds in the middle of a text (start 0: no start-of-text rule) or as the first token
 * with text (start 1: the decoder's start-of-text rules, such as Llama 2's Strip of one leading space or
 * Metaspace's first space, apply, as tok_decode applies them); bytes of an incomplete UTF-8 sequence as
 * they are: what constrained decoding checks a token against (start 0), and the text a token adds to an
 * answer. 1 with *bytes (malloc'd, NUL after *len bytes), 0 for ids that add no text (special, or not in
 * the vocabulary), -1 out of memory. */
int tok_piece_bytes(tok *t, int32_t id, int start, char **bytes, size_t *len);
void tok_stream_free(tok_stream *s);

/* Vocabulary */
int32_t tok_vocab_size(const tok *t);                       /* max id + 1 (added tokens included) */
int32_t tok_token_to_id(const tok *t, const char *s, size_t len); /* -1 when absent */
const char *tok_id_to_token(const tok *t, int32_t id, size_t *len); /* NULL when absent */
/* 1 for a token skip_special drops (the special added tokens and tokenizer_config's
 * additional_special_tokens): one that adds no text to a decode that skips them */
int tok_is_special(const tok *t, int32_t id);
/* How many ids an encoding with its special tokens puts before the text's own and after them (the
 * post-processor's template: a BOS, say); 0 and 0 without one. */
void tok_special_affixes(const tok *t, int *before, int *after);
/* Special tokens named in tokenizer_config.json (or NULL / -1). */
const char *tok_bos_token(const tok *t);
const char *tok_eos_token(const tok *t);
int32_t tok_bos_id(const tok *t);
int32_t tok_eos_id(const tok *t);
/* The chat_template from tokenizer_config.json (or the one set below), or NULL. */
const char *tok_chat_template(const tok *t);
/* A template that replaces tokenizer_config.json's (chat_template.jinja beside it, which transformers lets
 * clobber the config's, named list included: the "tool_use" one goes too). 0, or -1 out of memory. */
int tok_set_chat_template(tok *t, const char *src, size_t n);
/* tokenizer_config.json's template named "tool_use" (the named-list form), or NULL: tok_chat_render takes
 * it for a conversation whose "tools" is present and not null, as transformers' apply_chat_template does. */
const char *tok_chat_template_tools(const tok *t);

/* ---- Unicode normalization (valid UTF-8 in, malloc'd UTF-8 out; NULL on invalid input) ---- */
typedef enum { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD } tok_nf;
char *tok_normalize(tok_nf form, const char *s, size_t len, size_t *out_len);
/* Offset of the first invalid UTF-8 byte, or len when s is valid. */
size_t tok_utf8_check(const char *s, size_t len);

/* ---- chat templates (Jinja subset, semantics of @huggingface/jinja) ----
 * Statements: if/elif/else, for (tuple unpacking, loop.*, else, inline if-filter), set (incl. ns.attr and
 * block set), macro (defaults, keyword args), break, continue, generation (renders its body); comments; whitespace control; the
 * trim_blocks/lstrip_blocks preprocessing. Expressions: literals, lists, dicts, tuples, member and slice
 * access, calls, and/or/not, comparisons, in / not in, + - * / // % ** ~, ternaries, filters (tojson with
 * indent/sort_keys/ensure_ascii/separators, trim, length, count, upper, lower, default, join, first, last,
 * list, reverse, sort, unique, selectattr, rejectattr, map(attribute=), items, dictsort, indent, replace,
 * int, float, abs, string, safe), tests (defined, undefined, none, string, number, integer, boolean,
 * mapping, iterable, sequence, callable, true, false, odd, even, lower, upper), string methods
 * (startswith, endswith, split, strip, lstrip, rstrip, replace, upper, lower, title, capitalize), dict
 * methods (get, items, keys, values, dictsort), namespace(), range(), raise_exception(), strftime_now().
 * As in the reference: strip('x') ignores its argument and trims whitespace, booleans render as
 * "true"/"false", undefined ~ 'x' is 'x', upper/lower are JavaScript's full Unicode case mappings
 * (tok_case_map), title upper-cases after ASCII non-word characters, int truncates toward zero and float
 * of a string is parseFloat. Other filters and statements ({% call %}, {% filter %}) are named errors. */
/* ---- chat templates ----
 * Limits of one render (a hostile template is refused by name, never crashes or runs away; the real
 * Qwen/Llama/Phi templates use a small fraction of each):
 *  - nesting: statements, expressions and each link of a chain of operators, filters, tests, member
 *    accesses or calls count one level; more than TOK_JINJA_MAX_DEPTH is "nested too deeply" (the same
 *    bound applies to template variables and to values printed by tojson);
 *  - recursion at render time (expression nodes, blocks, macro calls): TOK_JINJA_MAX_RECURSION levels;
 *  - budget: TOK_JINJA_MAX_STEPS units of work (a node evaluated, a loop iteration, an element compared,
 *    256 bytes copied), TOK_JINJA_MAX_OUTPUT bytes in any one text (the output included), and
 *    TOK_JINJA_MAX_MEMORY bytes held at once; exceeding one is "template exceeds its render budget: ...".
 *    A loop iteration or macro call that writes to no older object releases its memory when it ends. */
#define TOK_JINJA_MAX_DEPTH 200
#define TOK_JINJA_MAX_RECURSION 1000
#define TOK_JINJA_MAX_STEPS 10000000
#define TOK_JINJA_MAX_OUTPUT 16777216
#define TOK_JINJA_MAX_MEMORY 268435456
/* Render template src with the variables in vars (a JSON object: messages, tools,
 * add_generation_prompt, bos_token, eos_token, ...). Returns a malloc'd string, or NULL with e filled:
 * a syntax error or an unsupported construct is named and quoted ("unsupported filter 'wordwrap' at
 * line 3"); raise_exception(msg) gives "template raised: msg". */
char *tok_jinja_render(const char *src, const json_t *vars, size_t *len, ogk_error *e);
/* Whether src is a template this engine can run: 0, or -1 with e filled as tok_jinja_render fills it for a
 * template that does not lex or parse ("template line 3, column 1: {% if %} is not closed: missing {% endif %}
 * at end of template", "template line 2, column 4: unsupported statement '{% with'"; lines and columns of the
 * template as written, columns in characters from 1). Nothing is rendered: what only a render finds (an
 * unsupported filter, raise_exception, a budget) is not looked for. */
int tok_jinja_check(const char *src, ogk_error *e);
/* What a template that parses uses and this engine lacks, found without rendering: the first filter or test
 * it does not have ("template line 4, column 12: unsupported filter 'wordwrap'"), -1 with e; else 0 (a
 * template that does not parse is 0 here: tok_jinja_check says that). A render fails there only if a
 * conversation reaches it, so this is worth a warning, not a refusal. */
int tok_jinja_lint(const char *src, ogk_error *e);
/* tok_jinja_check in the words every program uses for a chat template that comes with a model: 0 when src
 * parses, else -1 with e = "ORIGIN: the chat template does not parse: template line L, column C: WHY" (origin
 * names the file it came from: "PACK/tokenizer_config.json", "model.q4nx (chat_template.jinja)"). */
int tok_chat_template_check(const char *src, const char *origin, ogk_error *e);
/* The same for the "tool_use" template of a tokenizer_config.json (cfg, n bytes) whose chat_template is the
 * named-list form (the one tok_chat_template_tools gives): 0 when it parses or there is none (or cfg is no
 * JSON object: its loader says so), else -1 with e = "ORIGIN (its \"tool_use\" template): the chat template
 * does not parse: ...". */
int tok_config_tools_template_check(const char *cfg, size_t n, const char *origin, ogk_error *e);
/* The same with another budget (a server may want a smaller one; the fuzz target uses one): fields of 0
 * take the defaults above. Nesting and recursion limits are fixed (they guard the stack). */
typedef struct {
    uint64_t max_steps;
    size_t max_text, max_memory;
} tok_jinja_limits;
char *tok_jinja_render_with(const char *src, const json_t *vars, const tok_jinja_limits *lim, size_t *len,
                            ogk_error *e);
/* Built-in chat template for a model family (llama2, mistral, phi3, qwen2, llama3, chatml), or NULL. */
const char *tok_builtin_template(const char *family);
/* The template tok_chat_render uses: t's own, else the built-in one for family ("llama" picks llama3 when
 * t has <|start_header_id|>, else llama2), else NULL. */
const char *tok_chat_template_for(const tok *t, const char *family);
/* Render a conversation with t's template (or the built-in one for family when t has none).
 * vars as above; bos_token/eos_token are filled from t when absent. */
char *tok_chat_render(const tok *t, const char *family, const json_t *vars, size_t *len, ogk_error *e);

#endif
