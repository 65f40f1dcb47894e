#!/bin/bash
# text_cli.sh GEMPACK - text in, text out end to end: prompts as text through
# run, tokenize, golden and compare, the tokenizer found in a directory, a
# pack and a GGUF, goldens that re-tokenize their text, and chat prompts
# through a real Gemma 4 template (when setup.sh put one in build-ref/).
set -u
G=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
REF="$HERE/../build-ref"
EXPECT_TIMEOUT=120
. "$HERE/lib.sh"
said() { grep -qF -- "$1" "$T/err"; }
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/out" "$1"; }

"$G" fixture --variant e2b -o "$T/d" >/dev/null 2>&1
"$G" fixture --variant e2b --format gguf-q8_0 -o "$T/g" >/dev/null 2>&1
"$G" convert "$T/d" -o "$T/d.gpk" >/dev/null 2>&1
TEXT='Hello world, the quick brown fox. Ünïcödé ✓ 日本語'

echo "# tokenize: ids and pieces, the same from a directory, its pack and a GGUF of the same tokenizer"
expect 0 "tokenize a directory's tokenizer.json" -- "$G" tokenize "$T/d" "$TEXT" --json
ids=$(jget 'd["ids"]')
sha=$(jget 'd["tokenizer_sha256"]')
ok "... starts with <bos> (the BOS rule)" -- test "$(jget 'd["ids"][0], d["pieces"][0]')" = "(2, '<bos>')"
expect 0 "tokenize the pack converted from it" -- "$G" tokenize "$T/d.gpk" "$TEXT" --json
ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$ids"
ok "... the same tokenizer sha256 (the pack stores the file)" -- test "$(jget 'd["tokenizer_sha256"]')" = "$sha"
expect 0 "tokenize the GGUF fixture's tokenizer.ggml.* metadata" -- "$G" tokenize "$T/g/model.gguf" "$TEXT" --json
ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$ids"
gsha=$(jget 'd["tokenizer_sha256"]')
"$G" convert "$T/g/model.gguf" -o "$T/g.gpk" >/dev/null 2>&1
expect 0 "tokenize the pack converted from the GGUF (the tokenizer.json written from its metadata)" -- \
    "$G" tokenize "$T/g.gpk" "$TEXT" --json
ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$ids"
ok "... the GGUF's tokenizer sha256" -- test "$(jget 'd["tokenizer_sha256"]')" = "$gsha"
csv=$(python3 -c "print(','.join(map(str, $ids)))")
expect 0 "tokenize text output" -- "$G" tokenize "$T/d" "$TEXT"
ok "... the first line is the ids, for --tokens" -- test "$(head -n 1 "$T/out")" = "$csv"
expect 0 "tokenize --decode gives the text back" -- "$G" tokenize "$T/d" --decode "$csv"
ok "... with <bos> in front" -- test "$(cat "$T/out")" = "<bos>$TEXT"
printf '%s' "$TEXT" >"$T/text.txt"
expect 0 "tokenize --file" -- "$G" tokenize "$T/d" --file "$T/text.txt" --json
ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$ids"

echo "# run: a text prompt gives the logits of its ids, and generated text"
expect 0 "run --prompt --dump-logits" -- "$G" run "$T/d" --prompt "$TEXT" --generate 0 --dump-logits "$T/a.npz"
expect 0 "run --tokens (the same ids) --dump-logits" -- "$G" run "$T/d" --tokens "$csv" --dump-logits "$T/b.npz"
ok "... the two dumps are byte-identical" -- cmp -s "$T/a.npz" "$T/b.npz"
expect 0 "run --prompt --generate 12 --json" -- "$G" run "$T/d" --prompt "$TEXT" --generate 12 --json
ok "... prompt_ids are the tokenizer's" -- test "$(jget 'd["prompt_ids"]')" = "$ids"
gen=$(jget '",".join(map(str, d["generated"]))')
jtext=$(jget 'd["text"]')
expect 0 "run --tokens --generate 12" -- "$G" run "$T/d" --tokens "$csv" --generate 12
ok "... the same generated ids" -- grep -qx "generated: ${gen//,/ }" "$T/out"
expect 0 "run --prompt --generate 12 (text on stdout)" -- "$G" run "$T/d" --prompt "$TEXT" --generate 12
ok "... stdout is the generated text, as --json's text" -- test "$(cat "$T/out")" = "$jtext"
ok "... the report went to stderr" -- said "1 prompt,"
expect 0 "tokenize --decode of the generated ids" -- "$G" tokenize "$T/d" --decode "$gen"
expect 0 "run --prompt ×2: a batch, each text on its own line" -- "$G" run "$T/d" --prompt "$TEXT" --prompt "Hi" --generate 4
ok "... [0] and [1]" -- test "$(cut -c1-3 "$T/out" | tr '\n' ' ')" = "[0] [1] "
expect 2 "text and ids together" -- "$G" run "$T/d" --prompt "x" --tokens 2,3
ok "... said why" -- said "not both"
expect 2 "--system without --chat" -- "$G" run "$T/d" --prompt "x" --system "Be brief."
ok "... said why" -- said "--system goes with a chat prompt"

echo "# golden: a golden of text records it and re-tokenizes it"
expect 0 "golden make --prompt" -- "$G" golden make "$T/d" --prompt "$TEXT" -o "$T/gold.npz"
python3 - "$T/gold.npz" "$sha" >"$T/meta.txt" <<'PY'
import json, sys, zipfile
m = json.loads(zipfile.ZipFile(sys.argv[1]).read('meta.json'))
t = m['text']
print(t['kind'], t['tokenizer_sha256'] == sys.argv[2], t['bos_rule'], t['template_sha256'])
PY
ok "... meta.json text: kind raw, the tokenizer's sha256, the BOS rule [2]" -- test "$(cat "$T/meta.txt")" = "raw True [2] None"
expect 0 "golden check of the same model" -- "$G" golden check "$T/d" "$T/gold.npz"
ok "... the text re-tokenized to its ids" -- said "re-tokenized by the model's tokenizer"
expect 0 "golden check of the pack (its stored tokenizer)" -- "$G" golden check "$T/d.gpk" "$T/gold.npz"
cp -a "$T/d" "$T/d2"
python3 - "$T/d2/tokenizer.json" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j['model']['merges'] = j['model']['merges'][1:]   # the first merge gone: its pair now splits
json.dump(j, open(p, 'w'), ensure_ascii=False)
PY
expect 0 "the changed tokenizer splits the text differently" -- "$G" tokenize "$T/d2" "$TEXT" --json
if [ "$(jget 'd["ids"]')" != "$ids" ]; then
    expect 1 "golden check with a tokenizer that changed: fails" -- "$G" golden check "$T/d2" "$T/gold.npz" --json
    ok "... naming the first differing position and both pieces" -- said "the golden's ids and the model's tokenizer's differ at position"
    ok "... the JSON verdict is fail" -- test "$(jget 'd["verdict"]')" = "fail"
    expect 2 "compare A B --prompt where B's tokenizer differs: stops" -- "$G" compare "$T/d" "$T/d2" --prompt "$TEXT"
    ok "... naming the difference" -- said "A's tokenizer and B's give different ids at position"
else
    ok "the first merge changes the fixture text's ids" -- false
fi
expect 0 "compare A B --prompt (directory against its pack)" -- "$G" compare "$T/d" "$T/d.gpk" --prompt "$TEXT"

echo "# bad text gets a clear error"
printf '{"messages": 3}' >"$T/badconv.json"
expect 2 "a conversation that is not one" -- "$G" tokenize "$T/d" --chat-file "$T/badconv.json"
ok "... says what one is" -- said "a conversation is one JSON array of messages"
printf 'ab\xffcd' >"$T/bad.txt"
expect 2 "invalid UTF-8" -- "$G" run "$T/d" --prompt-file "$T/bad.txt"
ok "... names the file and the byte" -- said "bad.txt: text byte 2"
printf 'ab\0cd' >"$T/nul.txt"
expect 2 "a NUL byte" -- "$G" tokenize "$T/d" --file "$T/nul.txt"
head -c $((33 << 20)) /dev/zero | tr '\0' 'a' >"$T/big.txt"
expect 2 "a prompt over 32 MiB" -- "$G" run "$T/d" --prompt-file "$T/big.txt"
rm -f "$T/big.txt"
rm "$T/d2/tokenizer.json"
expect 2 "a directory without tokenizer.json" -- "$G" tokenize "$T/d2" "x"
ok "... says so" -- said "no tokenizer.json"
expect 2 "run --prompt on it" -- "$G" run "$T/d2" --prompt "x"
ok "... says so, pointing to --tokens" -- said "--tokens"
expect 0 "... --tokens still runs" -- "$G" run "$T/d2" --tokens 2,3
expect 2 "--chat on a model without a chat template" -- "$G" tokenize "$T/d" --chat "x"
ok "... says so, pointing to --prompt" -- said "--prompt"

echo "# chat prompts through the real Gemma 4 templates (build-ref/templates)"
shopt -s nullglob
tmpls=("$REF"/templates/*.jinja)
if [ ${#tmpls[@]} = 0 ] || ! /usr/bin/python3 -c 'import jinja2' 2>/dev/null; then
    echo "SKIP: no templates under build-ref/ or no python3-jinja2 (run setup.sh)"
fi
for tm in "${tmpls[@]}"; do
    name=$(basename "$tm")
    rm -rf "$T/c" && cp -a "$T/d" "$T/c" && cp "$tm" "$T/c/chat_template.jinja"
    expect 0 "$name: tokenize --chat --system" -- "$G" tokenize "$T/c" --chat "Hi there" --system "Be brief." --json
    /usr/bin/python3 - "$tm" >"$T/want.txt" <<'PY'
import sys, jinja2.sandbox
env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
t = env.from_string(open(sys.argv[1]).read())
sys.stdout.write(t.render(messages=[{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi there'}],
                          add_generation_prompt=True, bos_token='<bos>', eos_token='<eos>'))
PY
    ok "... rendered as python3-jinja2 renders it" -- test "$(jget 'd["rendered"]')" = "$(cat "$T/want.txt")"
    ok "... the template's sha256 recorded" -- test "$(jget 'd["template_sha256"]')" = "$(sha256sum <"$tm" | cut -c1-64)"
    chat_ids=$(jget 'd["ids"]')
    expect 0 "$name: the rendering tokenized raw" -- "$G" tokenize "$T/c" --file "$T/want.txt" --json
    ok "... BOS once: the chat ids are the raw ids without the tokenizer's extra <bos>" -- \
        test "$(jget 'd["ids"][1:]')" = "$chat_ids"
    expect 0 "$name: run --chat" -- "$G" run "$T/c" --chat "Hi there" --system "Be brief." --generate 3 --json
    ok "... its prompt ids" -- test "$(jget 'd["prompt_ids"]')" = "$chat_ids"
    expect 0 "$name: golden make --chat" -- "$G" golden make "$T/c" --chat "Hi there" -o "$T/cg.npz"
    expect 0 "$name: golden check re-renders and re-tokenizes" -- "$G" golden check "$T/c" "$T/cg.npz"
    ok "... the same ids" -- said "re-tokenized by the model's tokenizer"
    cat >"$T/conv.json" <<'JSON'
{"messages": [{"role": "system", "content": "  You call tools. \u3000"},
              {"role": "user", "content": "Weather in Paris, in C?"},
              {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather",
               "arguments": {"city": "Paris", "unit": "C", "days": 2, "ratio": 1e-05, "exact": 2.0, "alerts": null, "hourly": true}}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"},
              {"role": "assistant", "content": "It is 21.5 C."},
              {"role": "user", "content": "And tomorrow?"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
     "unit": {"type": "string", "enum": ["C", "F"]}, "days": {"type": "integer", "nullable": true}}, "required": ["city"]}}}],
 "enable_thinking": false}
JSON
    expect 0 "$name: tokenize --chat-file (tools, a tool call and its response, multi-turn)" -- \
        "$G" tokenize "$T/c" --chat-file "$T/conv.json" --json
    /usr/bin/python3 - "$tm" "$T/conv.json" >"$T/want2.txt" <<'PY'
import json, sys, jinja2.sandbox
env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
c = json.load(open(sys.argv[2]))
sys.stdout.write(env.from_string(open(sys.argv[1]).read()).render(
    messages=c['messages'], tools=c['tools'], enable_thinking=c['enable_thinking'], add_generation_prompt=True,
    bos_token='<bos>', eos_token='<eos>'))
PY
    ok "... rendered as python3-jinja2 renders it" -- test "$(jget 'd["rendered"]')" = "$(cat "$T/want2.txt")"
    conv_ids=$(jget 'd["ids"]')
    expect 0 "$name: golden make --chat-file" -- "$G" golden make "$T/c" --chat-file "$T/conv.json" -o "$T/cf.npz"
    expect 0 "$name: golden check re-renders the conversation" -- "$G" golden check "$T/c" "$T/cf.npz"
    ok "... the same ids" -- said "re-tokenized by the model's tokenizer"
    expect 0 "$name: convert keeps the template" -- "$G" convert "$T/c" -o "$T/c.gpk"
    expect 0 "$name: tokenize --chat on the pack" -- "$G" tokenize "$T/c.gpk" --chat "Hi there" --system "Be brief." --json
    ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$chat_ids"
    expect 0 "$name: tokenize --chat-file on the pack" -- "$G" tokenize "$T/c.gpk" --chat-file "$T/conv.json" --json
    ok "... the same ids" -- test "$(jget 'd["ids"]')" = "$conv_ids"
    rm -f "$T/c.gpk"
done
if [ ${#tmpls[@]} -gt 0 ]; then
    printf '%s\n' "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}" >"$T/c/chat_template.jinja"
    expect 2 "an unknown template: refused with its hash" -- "$G" run "$T/c" --chat "Hi"
    ok "... names the sha256" -- said "$(sha256sum <"$T/c/chat_template.jinja" | cut -c1-64)"
    expect 0 "... a raw --prompt still works" -- "$G" run "$T/c" --prompt "Hi" --generate 2
fi

finish
