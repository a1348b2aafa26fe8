#include "tok/tok_int.h"
char *tok_jinja_render(const char *src, const json_t *vars, size_t *len, ogk_error *e) { (void)src; (void)vars; (void)len; ogk_fail(e, "not yet"); return NULL; }
const char *tok_builtin_template(const char *family) { (void)family; return NULL; }
char *tok_chat_render(const tok *t, const char *family, const json_t *vars, size_t *len, ogk_error *e) { (void)t; (void)family; (void)vars; (void)len; ogk_fail(e, "not yet"); return NULL; }
