/* JSON mode (response_format {"type": "json_object"}): which tokens keep an answer a prefix of one JSON
 * object. A byte automaton accepts exactly the prefixes of the texts
 *     ws object
 * where object is RFC 8259's, with limits of its own: at most JG_MAX_DEPTH nested containers, white
 * space between tokens that is nothing, one space, or a line break and up to JG_MAX_INDENT spaces or
 * tabs (a model cannot idle in white space; llama.cpp's JSON grammars allow as much), and nothing after
 * the object's closing brace. Strings are well-formed UTF-8 without control bytes; \u escapes name no
 * lone surrogate. Every accepted prefix can still be completed (no dead ends), so a step always has a
 * byte to go on with.
 *
 * The vocabulary's pieces (tok_piece_bytes) are kept sorted with their common prefixes, so one mask walks
 * a trie: a prefix is fed once for all the tokens that share it, and a refused prefix skips them all. */
#ifndef OGK_SERVE_JSONGATE_H
#define OGK_SERVE_JSONGATE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "serve/jgre.h"
#include "tok/tok.h"
#include "util/util.h"

#define JG_MAX_DEPTH 64
#define JG_MAX_INDENT 20

/* A program: the answer as a sequence of segments — literal text, one name of a list, a JSON object, a
 * value of a schema — (a forced tool call: <tool_call>\n{"name": "NAME", "arguments": OBJECT}\n</tool_call>,
 * the object keeping to NAME's parameters; structured outputs: one schema's value). Names are written as
 * they are (no escapes), up to JG_MAX_NAMES of them, none a JSON-special character. */
#define JG_MAX_SEGS 8
#define JG_MAX_NAMES 128
#define JG_SCHEMA_DEPTH 16 /* nested objects and arrays a schema walks (values it leaves free: JG_MAX_DEPTH) */

/* A JSON Schema compiled for the automaton (response_format json_schema, a tool's parameters): objects
 * with "properties" (written in the order given; "required" ones must be, the others may be skipped; no
 * other keys), "items", "enum" / "const", "anyOf" / "oneOf" (taken as anyOf) / a list of types, whose
 * alternatives may begin alike (objects with keys in common, integer and number, an enum beside a string:
 * jg_gate follows each one the text so far still fits), "$ref" to "#/$defs/..." or "#/definitions/..."
 * and "#" (recursion allowed; what must nest deeper than JG_SCHEMA_DEPTH values is refused, what may is
 * offered only where it still fits), the
 * types string, number, integer, boolean, null, and {} / true for any value; the bounds minLength /
 * maxLength (characters, i.e. code points) beside type string, minItems / maxItems beside type array,
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum (draft 6 numbers or draft 4 booleans) beside
 * type number or integer: a bounded number is written without an exponent in at most JG_NUM_DIGITS
 * digits, and every prefix taken can still end inside the bounds; "pattern" beside type string (not with
 * minLength / maxLength; jgre.h): a character is taken only if the expression can still match, the
 * string closed only where it does; "format" date, time, date-time, uuid, ipv4, email beside type string
 * (without pattern or lengths) as the patterns that write them (jsongate.c FORMATS); annotations (title,
 * description, default, examples, other formats, $schema, $id, $comment) are ignored; dicts (an object
 * without properties: additionalProperties' schema or one patternProperties pattern's for every value,
 * propertyNames for the keys, minProperties 0 or 1, maxProperties), tuples (prefixItems, or draft 4's
 * "items" list with additionalItems), allOf (its parts' keywords as one schema), OpenAPI's nullable;
 * any other keyword is refused by name (the answer could not keep to it). */
#define JG_NUM_DIGITS 15 /* a bounded number's digits, all exact in a double */
typedef struct jg_schema jg_schema;
/* NULL with err filled (what and where) */
jg_schema *jg_schema_compile(const json_t *schema, char *err, size_t errn);
void jg_schema_free(jg_schema *sc);
/* its values are objects (and only objects) */
int jg_schema_object(const jg_schema *sc);

enum { JG_LIT, JG_NAME, JG_OBJECT, JG_SCHEMA };
typedef struct jg_prog {
    int nseg;
    struct {
        int kind;
        char *lit; /* JG_LIT */
        size_t n;
        /* JG_SCHEMA: the schema of the value; with by_name, the one of the name the JG_NAME segment
         * before took (NULL there: any object) */
        jg_schema *schema;
        jg_schema **by_name;
    } seg[JG_MAX_SEGS];
    char **names; /* sorted (JG_NAME) */
    int n_names;
} jg_prog;
jg_prog *jg_prog_new(void);
/* 0, or -1 (out of memory, too many segments or names, a name empty or with '"' or '\\') */
int jg_prog_lit(jg_prog *p, const char *lit);
int jg_prog_names(jg_prog *p, const char *const *names, int n);
int jg_prog_object(jg_prog *p);
/* a value of schema sc (the program owns it) */
int jg_prog_schema(jg_prog *p, jg_schema *sc);
/* an object whose schema is the one of the name taken (sorted like the names: by_name[i] for the i-th
 * name given to jg_prog_names, NULL: any object); the program owns them */
int jg_prog_schema_by_name(jg_prog *p, const char *const *names, jg_schema **schemas, int n);
void jg_prog_free(jg_prog *p);

typedef struct jg_state {
    uint64_t stack; /* bit d: container d (0 outermost) is an object */
    uint64_t cand;  /* schema: the properties a key being written may still be */
    const jg_prog *prog; /* NULL: one JSON object */
    uint16_t hex;   /* the \u escape's value so far */
    uint16_t off;   /* program: bytes of the segment's literal, name, key or enum value so far */
    uint8_t depth, mode, sub, key, ws, need, lo, hi, pos, hi_sur, any;
    uint8_t seg, nlo, nhi; /* program: the segment, the names (or enum values) still possible [nlo, nhi) */
    uint8_t pick;          /* program: the name taken */
    uint8_t br_want, br_n; /* schema: the alternative a value's first byte takes, of the br_n it could (anyOf) */
    uint8_t fdepth;        /* schema: frames in use */
    uint8_t nint, nfrac, neg; /* schema, a number with bounds: its digits before and after the point, its sign */
    int64_t num;           /* ... and all its digits as one integer */
    uint32_t cp;           /* schema, a string with a pattern: a character's bits so far (UTF-8), or the high
                            * surrogate of a \u pair */
    jgre_set re;           /* ... and the pattern's states */
    struct {
        uint16_t node;
        uint8_t phase, prop;
        uint32_t count; /* an array's items, a string's characters so far */
    } f[JG_SCHEMA_DEPTH];
} jg_state;

void jg_init(jg_state *s);
/* the state at the start of program p (which must outlive it) */
void jg_init_prog(jg_state *s, const jg_prog *p);
/* 1: c continues the text (s advanced); 0: refused (s unchanged). One path: where a value's first byte
 * could begin several alternatives of an anyOf, it takes the first (jg_gate follows them all). */
int jg_feed(jg_state *s, unsigned char c);
int jg_feed_bytes(jg_state *s, const char *p, size_t n); /* all or nothing */
/* the object (or the program) is complete: nothing may follow */
int jg_done(const jg_state *s);

typedef struct jg_vocab jg_vocab;
/* The pieces of ids [0, V) of t (ids past the tokenizer, special ones and empty pieces are never
 * allowed). NULL with e filled (out of memory). */
jg_vocab *jg_vocab_new(tok *t, int V, ogk_error *e);
/* the same from any source of pieces: piece(arg, id, ...) as tok_piece_bytes */
typedef int (*jg_piece_fn)(void *arg, int id, char **bytes, size_t *len);
jg_vocab *jg_vocab_build(int V, jg_piece_fn piece, void *arg, ogk_error *e);
void jg_vocab_free(jg_vocab *v);
/* allowed[id] = 1 for the tokens whose whole piece s accepts along any of the alternatives it may begin,
 * 0 for the rest (special tokens, EOS among them, never: the caller ends the answer once s is done);
 * returns how many are allowed, -1 out of memory */
int jg_allowed(const jg_vocab *v, const jg_state *s, uint8_t *allowed);

/* The gate: the states of every path the text so far still fits (anyOf alternatives that begin alike
 * fork the walk at their first byte; a path the text leaves is dropped, paths that meet are merged).
 * At most JG_FORKS paths are followed: past that the later ones are dropped, which narrows what may
 * come next but never lets anything invalid through. */
#define JG_FORKS 16
typedef struct jg_gate {
    int n;
    jg_state s[JG_FORKS];
} jg_gate;
/* the gate at the start of program p (NULL: one JSON object) */
void jg_gate_init(jg_gate *g, const jg_prog *p);
int jg_gate_feed(jg_gate *g, unsigned char c);                     /* 1 taken; 0 refused, g unchanged */
int jg_gate_feed_bytes(jg_gate *g, const char *p, size_t n);       /* all or nothing */
int jg_gate_done(const jg_gate *g);                                /* some path is complete */
/* the union of jg_allowed over the paths; -1 out of memory */
int jg_gate_allowed(const jg_vocab *v, const jg_gate *g, uint8_t *allowed);
/* a token's piece (NULL, 0 when it has none) */
const char *jg_piece(const jg_vocab *v, int id, size_t *len);

#endif
