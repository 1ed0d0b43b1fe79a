"""Renders chat templates as Hugging Face transformers does (the reference
for package chattemplate's tests).

Reads a JSON list of cases from stdin, each {"template", "messages",
"add_generation_prompt", "bos_token", "eos_token", "now"} with "now" an
ISO time that strftime_now formats, and writes a JSON list with, per case,
{"text": rendered} or {"error": message}.

The environment is transformers' _compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension and {% generation %} blocks (transformers'
AssistantTracker, which renders their body as is), a tojson filter that keeps non-ASCII
(ensure_ascii=False), and the raise_exception and strftime_now globals.
"""

import json
import sys
from datetime import datetime

import jinja2.ext
import jinja2.nodes
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    """{% generation %}…{% endgeneration %}: the body, as transformers'
    AssistantTracker renders it."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(case):
    now = datetime.fromisoformat(case["now"])
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    try:
        text = env.from_string(case["template"]).render(
            messages=case["messages"],
            add_generation_prompt=case["add_generation_prompt"],
            bos_token=case["bos_token"],
            eos_token=case["eos_token"],
        )
    except Exception as e:  # the template's raise_exception, undefined names, type errors
        return {"error": f"{type(e).__name__}: {e}"}
    return {"text": text}


def main():
    cases = json.load(sys.stdin)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
