/* The JSON mode's "pattern" (JSON Schema, a string's regular expression): compiled to a position
 * automaton (Glushkov: one state per character position of the expression, no empty moves) that the
 * byte automaton (jsongate.c) steps once per character of the string's value, so a string is closed
 * only where the expression matches it and no character is taken after which it no longer can.
 *
 * Syntax: ECMA-262's (what JSON Schema names), the part that is regular: literals and escapes (\n \t \r
 * \f \v \0 \xHH \uXXXX, escaped punctuation), "." (any character but a line break), classes [...] with
 * ranges and negation, \d \D \w \W \s \S (inside classes too), groups (...), (?:...) and (?<name>...),
 * alternation |, the quantifiers * + ? {n} {n,} {n,m} (lazy ones match the same strings), ^ first and $
 * last. As JSON Schema says, an expression is not anchored unless it says so: "abc" matches any string
 * holding abc. Refused by name: back-references, look-arounds, \b \B, ^ or $ elsewhere, and expressions
 * of more than JGRE_MAX_POS character positions once counted repetitions are written out ({n,m} copies
 * its atom m times). Characters are code points (ECMA-262 without the u flag counts UTF-16 units: an
 * astral character there is two for "." and {n}). */
#ifndef OGK_SERVE_JGRE_H
#define OGK_SERVE_JGRE_H
#include <stddef.h>
#include <stdint.h>

#define JGRE_MAX_POS 127
typedef struct {
    uint64_t w[2]; /* bit 0: the start; bit p: position p (1..JGRE_MAX_POS) */
} jgre_set;
typedef struct jgre jgre;

/* NULL with err filled (what and where in the expression) */
jgre *jgre_compile(const char *pat, size_t n, char *err, size_t errn);
void jgre_free(jgre *r);
/* the states before the first character */
jgre_set jgre_start(const jgre *r);
/* the states after code point cp; only states from which a match can still be reached are kept, so an
 * empty set means cp is refused */
jgre_set jgre_step(const jgre *r, jgre_set s, uint32_t cp);
int jgre_empty(jgre_set s);
/* some code point in [lo, hi] may come next (for a character whose first bytes are written) */
int jgre_can(const jgre *r, jgre_set s, uint32_t lo, uint32_t hi);
/* the string so far matches */
int jgre_accepts(const jgre *r, jgre_set s);
#endif
