#!/usr/bin/env python3
"""Random templates over the subset (expressions, filters, tests, methods, if / for / set / namespace,
whitespace control) rendered by python3-jinja2 set up as transformers sets it up (render_ref.py):
the reference of tests/test_template.c's differential test.
usage: random_ref.py SEED COUNT OUT.json; OUT.json: [{"t": template, "m": messages, "text" or "error"}]"""
import json
import random
import sys
import warnings

sys.dont_write_bytecode = True
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from render_ref import environment  # noqa: E402

R = random.Random(int(sys.argv[1]))
STRS = ["", "a", "A b", " x ", "\u00a0y\u3000", "\x1cz\u2028", "caf\u00e9", "\u65e5\u672c", "a,b,,c", "<|channel>t<channel|>v", "it's", 'q"', "\n\t", "AbC", "\u00df", "B", "_k"]
def lit(d=0):
    r = R.random()
    if r < .2: return repr(R.choice(STRS))
    if r < .35: return str(R.choice([0, 1, -1, 2, 7, 10, 255, 2**40]))
    if r < .5: return R.choice(["1.0", "2.5", "1e-5", "1e16", "0.1", "3e20", "-0.0", "1.5e-7", "100.0", "12345.678"])
    if r < .6: return R.choice(["none", "true", "false", "None", "True"])
    if r < .75 and d < 2: return "[" + ", ".join(expr(d+1) for _ in range(R.randint(0, 3))) + "]"
    if r < .85 and d < 2: return "{" + ", ".join("%s: %s" % (repr(R.choice(STRS)), expr(d+1)) for _ in range(R.randint(0, 3))) + "}"
    return R.choice(["messages", "messages[0]", "messages[1]", "x", "u", "messages[0]['k']", "messages[2]"])
FILTERS = ["upper", "lower", "trim", "length", "list", "first", "last", "join", "join(',')", "default('d')", "default('d', true)", "dictsort", "dictsort(true)", "tojson", "tojson(indent=2)", "replace('a', 'X')", "map('upper') | list", "string", "count"]
TESTS = ["defined", "undefined", "none", "string", "mapping", "sequence", "number", "boolean", "integer", "float", "iterable", "callable", "true", "false", "odd", "even"]
METHODS = [".get('k')", ".get('k', 1)", ".items() | list", ".keys() | list", ".values() | list", ".split()", ".split(',')", ".strip()", ".lstrip()", ".rstrip(' x')", ".startswith('a')", ".endswith('b')", ".upper()", ".lower()", "['k']", "[0]", "[-1]", "[1:]", "[::-1]", "[:2]", ".k", ".items"]
def expr(d=0):
    if d > 3: return lit(d)
    r = R.random()
    if r < .3: return lit(d)
    if r < .45: return "%s | %s" % (atom(d), R.choice(FILTERS))
    if r < .55: return "%s is %s%s" % (atom(d), R.choice(["", "not "]), R.choice(TESTS))
    if r < .65: return atom(d) + R.choice(METHODS)
    if r < .85: return "%s %s %s" % (atom(d), R.choice(["+", "-", "*", "/", "//", "%", "~", "and", "or", "==", "!=", "<", ">=", "in", "not in"]), atom(d))
    if r < .9: return "not " + atom(d)
    if r < .95: return "-" + atom(d)
    return "%s if %s else %s" % (atom(d), atom(d), atom(d))
def atom(d):
    e = expr(d+1)
    return "(" + e + ")" if R.random() < .5 else lit(d+1)
WS = ["", " ", "\n", "  \n", "\n  ", " \t"]
def tag(s): return "{%" + R.choice(["", "-", "+"]) + " " + s + " " + R.choice(["", "-"]) + "%}"
def body(d=0):
    out = []
    for _ in range(R.randint(1, 4)):
        r = R.random()
        out.append(R.choice(WS) + R.choice(["", "t", "txt"]) + R.choice(WS))
        if r < .4 or d > 2: out.append("{{" + R.choice(["", "-"]) + " " + expr() + " " + R.choice(["", "-"]) + "}}")
        elif r < .55: out.append(tag("if " + expr()) + body(d+1) + (tag("else") + body(d+1) if R.random() < .5 else "") + tag("endif"))
        elif r < .75: out.append(tag("for %s in %s" % (R.choice(["i", "k, v"]), expr())) + body(d+1) + "{{ loop.index }}{{ loop.last }}" + (tag("break") if R.random() < .2 else "") + tag("endfor"))
        elif r < .85: out.append(tag("set x = " + expr()))
        elif r < .9: out.append("{#" + R.choice(["", "-"]) + " c " + R.choice(["", "-"]) + "#}")
        else: out.append(tag("set ns = namespace(a=%s)" % expr()) + tag("set ns.a = ns.a ~ 'z'") + "{{ ns.a }}")
        out.append(R.choice(WS))
    return "".join(out)
cases = []
for _ in range(int(sys.argv[2])):
    t = body()
    m = R.choice([[{"k": "v", "B": 1, "a": [1, 2.5]}, "s t", None], [], ["\u00a0a b\u3000", {"k": None}], [1, 2.0, 1e-05], [{"k": {"z": 1, "Y": [None]}}, [["a", 1], ["b", 2]]]])
    cases.append({"t": t, "m": m})
env = environment()
warnings.simplefilter("ignore")  # jinja2 compiles constant subscripts Python warns about
for c in cases:
    try:
        c["text"] = env.from_string(c["t"]).render(messages=c["m"])
    except Exception as e:  # gempack must refuse these too
        c["error"] = "%s: %s" % (type(e).__name__, e)
with open(sys.argv[3], "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=True)
