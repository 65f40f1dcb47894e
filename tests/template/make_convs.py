#!/usr/bin/env python3
"""Writes tests/template/convs.json: the conversations the template parity test renders with
python3-jinja2 (render_ref.py) and with gempack (tests/test_template.c), under every Gemma 4
template of the table (docs/INPUTS.md). Deterministic; run it again after editing."""
import itertools
import json
import os

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
                "days": {"type": "integer", "nullable": True},
            },
            "required": ["city"],
        },
    },
}

NESTED = {
    "type": "function",
    "function": {
        "name": "book_trip",
        "description": "Book a trip with \u00e9tapes.",
        "parameters": {
            "type": "object",
            "properties": {
                "Traveler": {
                    "type": "object",
                    "description": "Who travels",
                    "properties": {
                        "name": {"type": "string"},
                        "age": {"type": "integer", "description": "Years"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["name"],
                },
                "legs": {
                    "type": "array",
                    "description": "Legs of the trip",
                    "items": {
                        "type": "object",
                        "properties": {"from": {"type": "string"}, "to": {"type": "string"},
                                       "price": {"type": "number", "nullable": True}},
                        "required": ["from", "to"],
                    },
                },
                "budget": {"type": "number", "nullable": True, "description": "Max \u20ac"},
                "mode": {"type": "string", "enum": ["train", "plane", None, 3, 2.5]},
                "flags": {"type": "array", "items": {"type": ["string", "null"], "enum": ["a", "B"]}},
                "anything": {"description": "no type at all"},
                "kind": {"type": ["string", "null"], "description": "a type list"},
                "extra": {"type": "OBJECT"},
            },
            "required": ["Traveler", "legs"],
        },
        "response": {"type": "object", "description": "Booking id"},
    },
}

NOPARAMS = {"type": "function", "function": {"name": "ping", "description": "Ping.", "parameters": {}}}
LISTTYPE = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search   ",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
                       "required": ["q"]},
    },
}

ARGS_ALL_TYPES = {
    "s": "text with 'quotes' and \"double\"",
    "i": 42, "neg": -7, "zero": 0,
    "f1": 1e-05, "f2": 2.0, "f3": 1e16, "f4": 0.1, "f5": -0.0, "f6": 123456.789, "f7": 1.5e300, "f8": 3.14e-10,
    "big": 9223372036854775807, "small": -9223372036854775808, "odd": 9007199254740993,
    "t": True, "fa": False, "n": None,
    "list": [1, 2.5, "x", None, True, [], {}],
    "dict": {"B": 1, "a": {"z": [1, {"y": None}]}, "C": "c"},
    "uni": "caf\u00e9 \u65e5\u672c \U0001F600",
    "ws": " \u00a0padded\u3000 ",
}

WS = ["\u00a0", "\u3000", "\x1c", "\u2028", "\u0085", "\u200b", "\t", "\r\n", "\x0b", "\x1f", "\u205f"]


def msg(role, content, **kw):
    m = {"role": role, "content": content}
    m.update(kw)
    return m


def base_convs():
    c = []
    add = lambda name, messages, tools=None, **kw: c.append(dict(name=name, messages=messages, tools=tools, **kw))
    add("user-only", [msg("user", "Hi there")])
    add("system-user", [msg("system", "Be brief."), msg("user", "Hi there")])
    add("developer-user", [msg("developer", "You are a dev assistant."), msg("user", "Hello")])
    add("multi-turn", [msg("system", "S"), msg("user", "one"), msg("assistant", "two"), msg("user", "three"),
                       msg("assistant", "four"), msg("user", "five")])
    add("model-last", [msg("user", "q"), msg("assistant", "a")])
    add("whitespace-trim", [msg("system", "".join(WS) + "sys" + "".join(WS)),
                            msg("user", "\u3000\u00a0 user text \x1c\x1d\n"), msg("assistant", "\u2029 answer \u0085")])
    add("zero-width-not-space", [msg("user", "\u200bzero width\u200b"), msg("assistant", "\ufeffbom\ufeff")])
    add("thinking-stripped", [msg("user", "q"),
                              msg("assistant", "<|channel>thought\nsecret<channel|>visible answer "),
                              msg("user", "again")])
    add("thinking-multi", [msg("user", "q"),
                           msg("assistant", "a<|channel>t1<channel|>b<|channel>t2<channel|> c<channel|>d")])
    add("parts-text", [msg("user", [{"type": "text", "text": " part one "}, {"type": "text", "text": "part two"}])])
    add("parts-media", [msg("user", [{"type": "image"}, {"type": "text", "text": "What is this?"},
                                     {"type": "audio"}, {"type": "video"}, {"type": "unknown"}])])
    add("parts-model", [msg("user", "q"),
                        msg("assistant", [{"type": "text", "text": "<|channel>x<channel|> answer "}])])
    add("media-last", [msg("user", [{"type": "text", "text": "look"}, {"type": "image"}])])
    add("unicode", [msg("user", "\u65e5\u672c\u8a9e \U0001F600 \u00e9\u00e8 \u0627\u0644\u0639\u0631\u0628\u064a\u0629"),
                    msg("assistant", "\u0928\u092e\u0938\u094d\u0924\u0947")])
    add("empty-content", [msg("user", ""), msg("assistant", "")])
    add("tools-weather", [msg("user", "Weather in Paris?")], tools=[WEATHER])
    add("tools-system", [msg("system", "Use tools."), msg("user", "Weather?")], tools=[WEATHER, NESTED])
    add("tools-nested", [msg("user", "book")], tools=[NESTED])
    add("tools-misc", [msg("user", "x")], tools=[NOPARAMS, LISTTYPE])
    calls = [{"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                           "arguments": {"city": "Paris", "unit": "celsius"}}}]
    add("tool-call-response", [msg("user", "Weather in Paris?"), msg("assistant", None, tool_calls=calls),
                               msg("tool", "18 degrees", tool_call_id="c1"), msg("assistant", "It is 18.")],
        tools=[WEATHER])
    add("tool-call-pending", [msg("user", "Weather?"), msg("assistant", "", tool_calls=calls)], tools=[WEATHER])
    add("tool-call-all-types", [msg("user", "go"),
                                msg("assistant", None, tool_calls=[{"id": "c9", "type": "function",
                                                                    "function": {"name": "book_trip",
                                                                                 "arguments": ARGS_ALL_TYPES}}]),
                                msg("tool", json.dumps({"ok": True}), tool_call_id="c9")], tools=[NESTED])
    add("tool-call-string-args", [msg("user", "go"),
                                  msg("assistant", None, tool_calls=[{"id": "s", "type": "function", "function": {
                                      "name": "search", "arguments": "{\"q\": \"cats\", \"limit\": 2}"}}]),
                                  msg("tool", "none found", tool_call_id="s")], tools=[LISTTYPE])
    add("tool-response-parts", [msg("user", "go"),
                                msg("assistant", None, tool_calls=[{"id": "p", "type": "function",
                                                                    "function": {"name": "search",
                                                                                 "arguments": {"q": "x"}}}]),
                                msg("tool", [{"type": "text", "text": "part A "}, {"type": "image"},
                                             {"type": "text", "text": "part B"}], tool_call_id="p"),
                                msg("assistant", "done")], tools=[LISTTYPE])
    add("tool-response-dict", [msg("user", "go"),
                               msg("assistant", None, tool_calls=[{"id": "d", "type": "function",
                                                                   "function": {"name": "search",
                                                                                "arguments": {"q": "y"}}}]),
                               msg("tool", {"results": [1, 2.0, None], "Total": 2, "msg": "ok"}, tool_call_id="d")],
        tools=[LISTTYPE])
    add("tool-multi-calls", [msg("user", "both"),
                             msg("assistant", None, tool_calls=[
                                 {"id": "a", "type": "function", "function": {"name": "get_weather",
                                                                              "arguments": {"city": "Oslo"}}},
                                 {"id": "b", "type": "function", "function": {"name": "search",
                                                                              "arguments": {"q": "Oslo", "limit": 1e-05}}}]),
                             msg("tool", "cold", tool_call_id="a"), msg("tool", "a city", name="search", tool_call_id="zz"),
                             msg("user", "thanks")], tools=[WEATHER, LISTTYPE])
    add("tool-unnamed-response", [msg("user", "go"),
                                  msg("assistant", None, tool_calls=[{"id": "q", "type": "function",
                                                                      "function": {"name": "ping", "arguments": {}}}]),
                                  msg("tool", "pong")], tools=[NOPARAMS])
    add("legacy-tool-responses", [msg("user", "go"),
                                  msg("assistant", None, tool_calls=[{"function": {"name": "ping", "arguments": {}}}],
                                      tool_responses=[{"name": "ping", "response": {"ok": True, "Latency": 0.25}},
                                                      {"name": "ping", "response": "plain"}]),
                                  msg("assistant", "after")], tools=[NOPARAMS])
    add("reasoning-tool-loop", [msg("user", "plan"),
                                msg("assistant", None, reasoning_content="I should call ping.",
                                    tool_calls=[{"id": "r", "type": "function",
                                                 "function": {"name": "ping", "arguments": {}}}]),
                                msg("tool", "pong", tool_call_id="r"),
                                msg("assistant", "Done.", reasoning_content="All good.")], tools=[NOPARAMS])
    add("reasoning-old-turn", [msg("user", "a"), msg("assistant", "b", reasoning_content="old thoughts"),
                               msg("user", "c")])
    add("reasoning-field", [msg("user", "a"),
                            msg("assistant", None, reasoning="via reasoning key",
                                tool_calls=[{"id": "z", "type": "function",
                                             "function": {"name": "ping", "arguments": {"x": [None, 1]}}}])],
        tools=[NOPARAMS])
    add("consecutive-assistant", [msg("user", "a"), msg("assistant", "b"), msg("assistant", "c"), msg("user", "d")])
    add("system-only", [msg("system", "only a system turn")])
    add("dictsort-keys", [msg("user", "go"),
                          msg("assistant", None, tool_calls=[{"id": "k", "type": "function", "function": {
                              "name": "search", "arguments": {"b": 1, "B": 2, "a": 3, "A": 4, "_x": 5, "\u00c4rger": 6,
                                                              "\u00e4b": 7, "\u540d\u524d": 8, "Z": 9, "10": 10}}}])],
        tools=[LISTTYPE])
    add("content-none-user", [msg("user", None), msg("assistant", "x")])
    add("long-text", [msg("user", "word " * 300), msg("assistant", "ok " * 200)])
    add("newlines", [msg("user", "line1\nline2\r\nline3\n\n"), msg("assistant", "\n\nA\n\n")])
    add("specials-literal", [msg("user", "<|turn>user\nfake<turn|> <bos> {{ not jinja }} {% if %}")])
    add("floats-in-args", [msg("user", "f"),
                           msg("assistant", None, tool_calls=[{"id": "f", "type": "function", "function": {
                               "name": "search", "arguments": {"a": 1e-05, "b": 2.0, "c": 1e16, "d": 1e15,
                                                               "e": 0.0001, "f": 1.0e-4, "g": 5e-324,
                                                               "h": 1.7976931348623157e308, "i": 100.0,
                                                               "j": 0.30000000000000004}}}])], tools=[LISTTYPE])
    add("nested-args", [msg("user", "n"),
                        msg("assistant", None, tool_calls=[{"id": "n", "type": "function", "function": {
                            "name": "book_trip", "arguments": {"Traveler": {"name": "Ann", "tags": ["x", "y"]},
                                                               "legs": [{"from": "A", "to": "B", "price": None}]}}}])],
        tools=[NESTED])
    return c


def main():
    convs = []
    for conv in base_convs():
        # each conversation under the switches: generation prompt and enable_thinking undefined / false / true
        for agp, think in itertools.product([False, True], [None, False, True]):
            if (agp, think) not in [(True, None), (False, None), (True, True), (True, False)] and conv["name"] not in (
                    "system-user", "tools-weather", "tool-call-response"):
                continue
            d = dict(conv)
            d["name"] = "%s/agp=%d/think=%s" % (conv["name"], agp, {None: "undef", False: "false", True: "true"}[think])
            d["add_generation_prompt"] = agp
            d["enable_thinking"] = think
            convs.append(d)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "convs.json")
    with open(out, "w") as f:
        json.dump(convs, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("%d conversations -> %s" % (len(convs), out))


if __name__ == "__main__":
    main()
