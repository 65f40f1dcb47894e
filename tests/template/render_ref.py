#!/usr/bin/env python3
"""Renders every conversation of convs.json with each template given, with Debian's python3-jinja2
set up as transformers' apply_chat_template sets it up (utils/chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
its tojson override, raise_exception; variables messages, tools, documents, add_generation_prompt,
bos_token '<bos>', eos_token '<eos>', and enable_thinking where set).

usage: render_ref.py convs.json out.json label=template.jinja ...
out.json: [{"template": label, "name": conv name, "text": str} or {..., "error": str}]"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    convs = json.load(open(sys.argv[1], encoding="utf-8"))
    env = environment()
    out = []
    for arg in sys.argv[3:]:
        label, path = arg.split("=", 1)
        template = env.from_string(open(path, encoding="utf-8", newline="").read())
        for c in convs:
            kw = dict(messages=c["messages"], tools=c["tools"], documents=None,
                      add_generation_prompt=c["add_generation_prompt"], bos_token="<bos>", eos_token="<eos>")
            if c["enable_thinking"] is not None:
                kw["enable_thinking"] = c["enable_thinking"]
            r = {"template": label, "name": c["name"]}
            try:
                r["text"] = template.render(**kw)
            except Exception as e:  # the renderer must refuse these too
                r["error"] = "%s: %s" % (type(e).__name__, e)
            out.append(r)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True)
    print("jinja2 %s: %d renders" % (jinja2.__version__, len(out)))


if __name__ == "__main__":
    main()
