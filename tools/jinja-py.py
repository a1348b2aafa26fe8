#!/usr/bin/python3
"""jinja-py.py - Python's Jinja (Debian's python3-jinja2) as transformers runs a chat template: the second
chat-template oracle of t/tok.bats, for what @huggingface/jinja (the first) cannot render.

  /usr/bin/python3 tools/jinja-py.py TEMPLATE [TEMPLATE...] < CONVERSATIONS.jsonl
      each input line a JSON object of template variables (or an array of messages); prints one JSON value
      per line: the rendered string, or {"error": message}. Several templates: each over every input line
      in turn (template-major), in one process.

The environment is transformers' (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
its tojson, raise_exception and strftime_now, a {% generation %} tag rendering its body); the variables are
exactly the input's (nothing added for what it leaves out). Exit status: 0 ok, 2 usage, 3 unreadable input,
4 python3-jinja2 missing.
"""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("jinja-py.py: python3-jinja2 is not installed (tools/deps.sh installs it)\n")
    sys.exit(4)


class Generation(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: the body as it is"""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        srcs = [open(p, encoding="utf-8").read() for p in sys.argv[1:]]
    except OSError as e:
        sys.stderr.write("jinja-py.py: %s\n" % e)
        return 3
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    convs = []
    for line in sys.stdin:
        v = json.loads(line)
        convs.append({"messages": v} if isinstance(v, list) else v)
    for src in srcs:
        try:
            tpl, err = env.from_string(src), None
        except Exception as e:  # a template Python's Jinja cannot compile: every line says so
            tpl, err = None, "compile: %s" % e
        for v in convs:
            if tpl is None:
                out = {"error": err}
            else:
                try:
                    out = tpl.render(**v)
                except Exception as e:
                    out = {"error": str(e)}
            sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
