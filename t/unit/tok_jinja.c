/* The Jinja evaluator (tok_jinja_render) directly: expected outputs are written by hand from Jinja's
 * semantics as @huggingface/jinja implements them (booleans print "true"/"false", `/` is true division,
 * a for loop has its own scope), never produced by this code. Then the limits of tok.h: hostile nesting
 * (statements, chains of filters / operators / attributes / not / unary minus / calls, elif chains)
 * is a named error and never a stack overflow, and runaway renders (nested loops, a doubling macro, a
 * join bomb, memory held through a namespace, deep recursion) are refused by name within seconds. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tap.h"
#include "tok/tok_int.h"

static char *render(const char *src, const char *vars_json, size_t *len, ogk_error *e)
{
    json_error_t je;
    json_t *v = vars_json ? json_loads(vars_json, 0, &je) : NULL;
    char *r = tok_jinja_render(src, v, len, e);
    json_decref(v);
    return r;
}

static void same(const char *src, const char *vars, const char *want, const char *what)
{
    ogk_error e = {{0}};
    size_t n = 0;
    char *r = render(src, vars, &n, &e);
    int ok = r && n == strlen(want) && !memcmp(r, want, n);
    TAP_OK(ok, "%s", what);
    if (!ok)
        printf("#   want '%s'\n#   got  '%s' (%s)\n", want, r ? r : "NULL", r ? "" : e.msg);
    free(r);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* src must be refused with an error containing want within 60 s: that bounds a hang, not a speed (the
 * machine may be loaded, the build sanitized; unloaded, each case takes well under 2 s) */
static void refused(const char *src, const char *want, const char *what)
{
    ogk_error e = {{0}};
    size_t n = 0;
    double t0 = now();
    char *r = render(src, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &n, &e);
    double dt = now() - t0;
    int ok = !r && strstr(e.msg, want) && dt < 60;
    TAP_OK(ok, "%s: refused naming '%s' (%.2f s)", what, want, dt);
    if (!ok)
        printf("#   got %s: '%s'\n", r ? "output" : "error", r ? "" : e.msg);
    free(r);
}

/* PRE, then REP n times, then MID, then END n times */
static char *repeat(const char *pre, const char *rep, size_t n, const char *mid, const char *end)
{
    size_t L = strlen(pre) + n * (strlen(rep) + strlen(end)) + strlen(mid) + 1;
    char *s = malloc(L), *p = s;
    p = stpcpy(p, pre);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, rep);
    p = stpcpy(p, mid);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, end);
    return s;
}

static void semantics(void)
{
    same("{{ 'a' ~ 'b' ~ 1 }}", NULL, "ab1", "~ concatenates strings and numbers");
    same("{{ 7 // 2 }} {{ 7 / 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -3 + 1 }}", NULL, "3 3.5 1 1024 -2", "arithmetic");
    same("{{ 1 < 2 and not (3 == 4) }} {{ none is none }} {{ 'b' in 'abc' }} {{ 4 not in [1, 2] }}", NULL,
         "true true true true", "comparisons, tests, in; booleans print lower-case");
    same("{% for x in [1, 2, 3] %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", NULL, "1,2,3",
         "for with loop.last");
    same("{% for x in ['a', 'b'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{% endfor %}", NULL, "102211",
         "loop.index / index0 / revindex");
    same("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty", "for ... else on an empty list");
    same("{% for i in [1] %}{% endfor %}{{ i is defined }}", NULL, "false", "a loop variable does not leak out");
    same("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;",
         "tuple unpacking over items");
    same("{% for x in range(6) if x is odd %}{{ x }}{% endfor %}", NULL, "135", "for with an inline if filter");
    same("{% for i in range(3) %}{% for j in range(2) %}{{ i }}{{ j }} {% endfor %}{% endfor %}", NULL,
         "00 01 10 11 20 21 ", "nested loops");
    same("{% for m in ['a', 'b'] %}{% set x = m ~ '!' %}{{ x }}{% endfor %}", NULL, "a!b!", "set inside a loop");
    same("{% set ns = namespace(s='') %}{% for i in range(3) %}{% set ns.s = ns.s ~ (i * 2) %}{% endfor %}{{ ns.s }}",
         NULL, "024", "a namespace carries values out of a loop");
    same("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% for j in range(2) %}"
         "{% set ns.l = ns.l + [i ~ j] %}{% endfor %}{% endfor %}{{ ns.l | join(',') }}",
         NULL, "00,01,10,11,20,21", "values made in an inner loop survive through a namespace");
    same("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('Bob') }}|{{ greet('Al', p='Yo') }}",
         NULL, "Hi Bob|Yo Al", "macro with a default and a keyword argument");
    same("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321",
         "a recursive macro");
    same("{% set ns = namespace(l=[]) %}{% macro add(x) %}{% set ns.l = ns.l + [x ~ '?'] %}{% endmacro %}"
         "{{ add('a') }}{{ add('b') }}{{ ns.l | join }}",
         NULL, "a?b?", "a macro writing to a namespace keeps its values");
    same("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc", "whitespace control");
    same("{{ [3, 1, 2] | sort | join('-') }} {{ 'Hello World' | lower }} {{ '  x ' | trim }}", NULL, "1-2-3 hello world x",
         "filters sort, join, lower, trim");
    same("{{ 'hello'[1:3] }} {{ [1, 2, 3, 4][::-1] | join(',') }} {{ 'abc'[-1] }}", NULL, "el 4,3,2,1 c", "slices");
    same("{{ {'a': [1, 'x', none, true]} | tojson }}", NULL, "{\"a\": [1, \"x\", null, true]}", "tojson");
    same("{{ x | default('d') }} {{ '' | default('e', true) }}", NULL, "d e", "default");
    same("{{ messages[0].content | upper }}{{ messages | length }}", "{\"messages\": [{\"content\": \"hi\"}]}", "HI1",
         "variables from JSON");
    same("{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21", "tuple assignment");
    same("{{ 'yes' if 0 else 'no' }}", NULL, "no", "ternary");
    same("{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box('b') %}in{{ 1 + 1 }}{% endcall %}", NULL,
         "[b:in2]", "a call block: the macro's caller() renders the block");
    same("{% macro two() %}{{ caller(1) }}{{ caller(2, y='z') }}{% endmacro %}"
         "{% call(x, y='-') two() %}<{{ x }}{{ y }}>{% endcall %}",
         NULL, "<1-><2z>", "caller() with parameters, a default and a keyword");
    same("{% set v = 'outer' %}{% macro m() %}{{ caller() }}{% endmacro %}{% for v in ['loop'] %}"
         "{% call m() %}{{ v }}{% endcall %}{% endfor %}",
         NULL, "loop", "the block sees the scope it is written in");
    same("{% filter upper %}a{{ 'b' }}c{% endfilter %}|{% filter replace('x', 'y') %}xox{% endfilter %}", NULL,
         "ABC|yoy", "filter blocks, with and without arguments");
    same("{% macro v(a) %}{{ a }};{{ varargs | join(',') }};{{ kwargs.k }}{% endmacro %}{{ v(1, 2, 3, k=4) }}", NULL,
         "1;2,3;4", "a macro reading varargs and kwargs takes extra arguments");
    same("{% macro v(a) %}{{ varargs | length }}{% endmacro %}{{ v(1) }}", NULL, "0", "varargs empty without extras");
    refused("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", "macro 'f' takes not more than 1 argument(s)",
            "extra positional arguments to a macro without varargs");
    refused("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, b=2) }}", "macro 'f' takes no keyword argument 'b'",
            "an unknown keyword to a macro without kwargs");
    refused("{% macro f() %}{{ caller() }}{% endmacro %}{{ f() }}", "Cannot call something that is not a function",
            "caller() outside a call block");
    refused("{% call x.y() %}{% endcall %}", "expected a macro name after 'call'", "a call block on a member");
    refused("{% filter upper %}abc", "missing {% endfilter %}", "an unclosed filter block");
    refused("{% filter nosuch %}abc{% endfilter %}", "unsupported filter 'nosuch'", "an unknown filter in a block");
    char *ok = repeat("", "{% if true %}", 150, "x", "{% endif %}");
    same(ok, NULL, "x", "150 nested ifs (under the nesting limit) render");
    free(ok);
    same("{{ 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 }}", NULL, "20",
         "a chain of 19 operators renders");
}

static void nesting(void)
{
    static const struct {
        const char *pre, *rep, *mid, *end, *what;
        size_t n;
    } c[] = {
        {"", "{% if true %}", "x", "{% endif %}", "20,000 nested if statements", 20000},
        {"", "{% for i in [1] %}", "x", "{% endfor %}", "20,000 nested for statements", 20000},
        {"{{ 'a'", "|trim", " }}", "", "200,000 chained filters", 200000},
        {"{{ 1", " + 1", " }}", "", "200,000 chained + operators", 200000},
        {"{{ 1", " ~ 1", " }}", "", "200,000 chained ~ operators", 200000},
        {"{{ 1", " == 1", " }}", "", "200,000 chained comparisons", 200000},
        {"{{ x", " or x", " }}", "", "200,000 chained or", 200000},
        {"{{ x", " is defined", " }}", "", "200,000 chained tests", 200000},
        {"{{ messages", ".x", " }}", "", "200,000 chained attribute accesses", 200000},
        {"{{ messages", "[0]", " }}", "", "200,000 chained subscripts", 200000},
        {"{{ ", "not ", "1 }}", "", "200,000 nested not", 200000},
        {"{{ ", "- ", "1 }}", "", "200,000 nested unary minus", 200000},
        {"{{ range", "()", " }}", "", "100,000 chained calls", 100000},
        {"{{ ", "(", "1", ")", "100,000 nested parentheses", 100000},
        {"{{ ", "[", "1", "]", "100,000 nested lists", 100000},
        {"{{ 1", " if 1 else 1", " }}", "", "100,000 chained ternaries", 100000},
        {"{% if false %}", "{% elif false %}", "{% endif %}", "", "50,000 elif branches", 50000},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char *s = repeat(c[i].pre, c[i].rep, c[i].n, c[i].mid, c[i].end);
        refused(s, "nested too deeply", c[i].what);
        free(s);
    }
    refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion too deep", "unbounded macro recursion");
    refused("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}",
            "nested too deeply", "tojson of a value nested 1,000 deep");
}

static void budget(void)
{
    refused("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "render budget",
            "two nested range(100000) loops");
    refused("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
            "render budget", "a macro calling itself twice per level, 40 levels");
    refused("{% set s = 'xxxxxxxx' %}{% for i in range(40) %}{% set s = [s, s] | join %}{% endfor %}{{ s }}",
            "a text longer than", "a doubling join");
    refused("{% set r = range(100000) %}{% for i in range(1000000) %}{% set s = r | join(',') %}{% endfor %}",
            "render budget", "joining 100,000 numbers a million times");
    refused("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
            "bytes of memory", "a list grown by copying, held through a namespace");
    refused("{% for i in range(1000000) %}{{ i }}{% endfor %}{% for i in range(1000000) %}{{ i }}{% endfor %}"
            "{% for i in range(1000000) %}{{ i }}{% endfor %}{% for i in range(1000000) %}{{ i }}{% endfor %}",
            "render budget", "output of millions of numbers");
}

/* Where @huggingface/jinja fails, Python's Jinja (transformers): the expected text is what Debian's
 * python3-jinja2 renders for the same template and variables (tools/jinja-py.py, 2026-12-06) */
static void python_semantics(void)
{
    same("A{% for a in nope %}x{% else %}E{% endfor %}|{{ nope|length }}|{{ nope|trim }}|{{ nope|list|length }}|"
         "{{ none_v|selectattr('a')|list|length }}|{{ d|string }}|{{ [3, 1, 2]|min }}{{ ['b', 'a']|max }}|"
         "{{ '{}+{{}}-{}'.format('x', 7) }}{{ '{1}{0}'.format('x', 7) }}|{{ 'y' if nope not in ['a'] else 'n' }}|"
         "{{ {'s': \"it's\", 'q': 'say \"hi\"'}|string }}",
         "{\"none_v\": null, \"d\": {\"a\": \"b\", \"c\": [1, null, true, 1.5, 0.00001], \"t\": \"x\\ny\"}}",
         "AE|0||0|0|{'a': 'b', 'c': [1, None, True, 1.5, 1e-05], 't': 'x\\ny'}|1b|x+{}-77x|y|"
         "{'s': \"it's\", 'q': 'say \"hi\"'}",
         "Python's Jinja where the reference fails: undefined iterates empty, '' and 0 long; |string of a dict; "
         "|min |max; str.format; not in");
    same("{% set l = [u1] %}{{ 'in' if u2 in l else 'out' }}", NULL, "in",
         "an undefined value is in a list holding an undefined one (Undefined == Undefined)");
    refused("{{ '{}{0}'.format(1) }}", "cannot switch between automatic field numbering", "str.format mixing {} and {0}");
    refused("{{ '{name}'.format(1) }}", "only {} and {number} fields", "str.format with a named field");
}

int main(void)
{
    semantics();
    python_semantics();
    nesting();
    budget();
    return TAP_DONE();
}
