#!/bin/bash
# eval_cli.sh GEMPACK - `gempack eval` end to end on fixtures: the bf16 source
# against its MLX affine 4-bit, mxfp4, compressed-tensors w4a16, GGUF Q4_0 and
# GGUF Q4_K_M forms (all five topologies); the reference against itself (KLD 0,
# PPL ratio 1); PPL and KLD recomputed in NumPy from the windows' logits
# (gempack run --dump-logits) with their own log-softmax; --save-ref / --ref;
# thresholds and exit codes; the HTML page; bad text and a tokenizer that
# gives other ids refused; the gates: what goldens and checks record, golden
# check --self-test, generation checks recomputed in Python.
set -u
G=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECT_TIMEOUT=300
PY=/usr/bin/python3
. "$HERE/lib.sh"
jget() { $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/out" "$1"; }

cat >"$T/text.txt" <<'EOF'
Before any marker: category text.
@@ category prose
The river ran low that summer, and the boats sat in the mud like sleeping dogs. Nobody in the village
remembered a drier year, though the old miller claimed he did, every evening, to anyone who would listen.
@@ category code
for (int i = 0; i < n; i++)
    total += weights[i] * inputs[i];
@@ category non-latin
Утром шёл дождь, а вечером небо прояснилось. 今日は朝から雨でしたが、夕方には晴れました。
@@ category prose
A second prose section joins the first category.
EOF

for v in e2b e4b 12b 26b-a4b 31b; do
    echo "# $v: the source against five formats of it"
    "$G" fixture --variant $v -o "$T/$v" >/dev/null 2>&1
    "$G" fixture --variant $v --format ct-w4a16 -o "$T/$v-ct" >/dev/null 2>&1
    "$G" fixture --variant $v --format gguf-q4_0 -o "$T/$v-q40" >/dev/null 2>&1
    "$G" fixture --variant $v --format gguf-q4_k_m -o "$T/$v-qkm" >/dev/null 2>&1
    "$G" convert "$T/$v" --bits 4 -o "$T/$v-q4.gpk" >/dev/null 2>&1
    "$G" convert "$T/$v" --format mlx --mode mxfp4 -o "$T/$v-mx" >/dev/null 2>&1
    cands=("$T/$v" "$T/$v-q4.gpk" "$T/$v-mx" "$T/$v-ct" "$T/$v-q40/model.gguf" "$T/$v-qkm/model.gguf")
    expect 0 "eval: one run, six candidates (the source itself first)" -- \
        "$G" eval "$T/$v" "${cands[@]}" --text-file "$T/text.txt" --ctx 32 --json --report "$T/$v.html"
    cp "$T/out" "$T/$v.json"
    ok "... six candidates" -- test "$(jget 'len(d["candidates"])')" = 6
    ok "... the reference against itself: KLD exactly 0, PPL ratio exactly 1, top-1 1" -- \
        test "$(jget '[d["candidates"][0]["all"][k] for k in ("ppl_ratio",)] + [d["candidates"][0]["all"]["kld"]["max"], d["candidates"][0]["all"]["topk_agreement"][0]]')" = "[1.0, 0.0, 1.0]"
    ok "... every quantized candidate costs something" -- \
        $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert all(c["all"]["kld"]["mean"] > 0 for c in d["candidates"][1:])' "$T/$v.json"
    ok "... categories in the order they come" -- test "$(jget 'd["text"]["categories"]')" = "['text', 'prose', 'code', 'non-latin']"
    ok "... the categories' positions add up to the total" -- \
        $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["candidates"][1]; assert sum(v["positions"] for v in c["categories"].values()) == c["all"]["positions"] == d["positions"]' "$T/$v.json"
    ok "... bits per weight: a 4-bit candidate below the bf16 source" -- \
        $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); b=[c["bits_per_weight"] for c in d["candidates"]]; assert 15 < b[0] <= 16.5 and b[1] < 8, b' "$T/$v.json"
    ok "... what it measured: fingerprints, tokenizer, text, version, numerics" -- \
        $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["reference"]["fingerprint"]) == 64 and len(d["reference"]["tokenizer_sha256"]) == 64 and len(d["text"]["sha256"]) == 64 and d["gempack_version"] and d["numerics"] >= 9 and all(len(c["fingerprint"]) == 64 for c in d["candidates"])' "$T/$v.json"
    ok "... the page: table, KLD curves, category bars, frontier points" -- \
        $PY -c 'import sys; s=open(sys.argv[1]).read(); assert s.count("class=\"cdf\"") == 6 and s.count("class=\"catbar\"") == 24 and s.count("class=\"point\"") == 6 and "id=\"candidates\"" in s' "$T/$v.html"
done

echo "# PPL and KLD recomputed from the windows' logits in NumPy"
expect 0 "eval with --save-ref" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" "$T/e2b-qkm/model.gguf" --text-file "$T/text.txt" --ctx 32 --save-ref "$T/ref.npz" --json
cp "$T/out" "$T/direct.json"
$PY - "$T/ref.npz" "$T/windows.txt" <<'PY'
import numpy as np, sys
t = np.load(sys.argv[1])["tokens"]
with open(sys.argv[2], "w") as f:
    for w in range(len(t) // 32):
        f.write(",".join(str(int(x)) for x in t[32 * w:32 * w + 32]) + "\n")
PY
w=0
while read -r ids; do # each window through the reference (m0) and the two candidates (m1, m2)
    k=0
    for m in e2b e2b-q4.gpk e2b-qkm/model.gguf; do
        "$G" run "$T/$m" --tokens "$ids" --threads 1 --dump-logits "$T/w$w-m$k.npz" >/dev/null 2>&1
        k=$((k + 1))
    done
    w=$((w + 1))
done <"$T/windows.txt"
ok "independent: PPL, PPL ratio, KLD mean, p99 and top-1 within 1e-9 (relative) of the direct run" -- $PY - "$T" "$T/direct.json" "$T/ref.npz" <<'PY'
import json, sys
import numpy as np
T, d = sys.argv[1], json.load(open(sys.argv[2]))
toks = np.load(sys.argv[3])["tokens"]
def lsm(z):
    z = z.astype(np.float64); m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
W = len(toks) // 32
ref = [lsm(np.load(T + "/w%d-m0.npz" % w)["logits"]) for w in range(W)]
for ci, m in enumerate(["m1", "m2"]):
    kld, nll, nllr, top1 = [], [], [], []
    for w in range(W):
        q = lsm(np.load(T + "/w%d-%s.npz" % (w, m))["logits"])
        p = ref[w]
        # the next token: the stream's, not the window's BOS-replaced first
        for j in range(16, 31):
            nxt = toks[32 * w + j + 1]
            kld.append(float((np.exp(p[j]) * (p[j] - q[j])).sum()))
            nll.append(-q[j, nxt]); nllr.append(-p[j, nxt])
            top1.append(np.argmax(p[j]) == np.argmax(q[j]))
    c = d["candidates"][ci]["all"]
    kld = np.array(kld); ppl, pplr = np.exp(np.mean(nll)), np.exp(np.mean(nllr))
    k = np.sort(kld); p99 = k[int(np.ceil(0.99 * len(k))) - 1]
    for name, mine, theirs in (("ppl", ppl, c["ppl"]), ("ppl_ratio", ppl / pplr, c["ppl_ratio"]),
                               ("kld mean", kld.mean(), c["kld"]["mean"]), ("kld p99", p99, c["kld"]["p99"]),
                               ("top1", np.mean(top1), c["topk_agreement"][0])):
        assert abs(mine - theirs) <= 1e-9 * abs(mine) + 1e-15, (m, name, mine, theirs)
    print("%s: PPL %.6g ratio %.6g KLD mean %.6g p99 %.6g top-1 %.4f: as eval's" % (m, ppl, ppl / pplr, kld.mean(), p99, np.mean(top1)))
PY

echo "# --ref: the saved reference instead of running it"
expect 0 "eval --ref: the reference itself as a candidate" -- "$G" eval "$T/e2b" "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/text.txt" --ctx 32 --ref "$T/ref.npz" --json
ok "... KLD exactly 0 and PPL ratio exactly 1 against the stored distributions" -- test "$(jget '[d["candidates"][0]["all"]["kld"]["max"], d["candidates"][0]["all"]["ppl_ratio"]]')" = "[0.0, 1.0]"
ok "... the PPL ratio of a candidate exactly the direct run's (the NLL is stored whole)" -- \
    $PY -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a["candidates"][0]["all"]["ppl_ratio"] == b["candidates"][1]["all"]["ppl_ratio"]' "$T/direct.json" "$T/out"
ok "... its KLD from the top 32 and the rest's mass: at most the direct one, within 5 %" -- \
    $PY -c 'import json,sys; a=json.load(open(sys.argv[1]))["candidates"][0]["all"]["kld"]["mean"]; b=json.load(open(sys.argv[2]))["candidates"][1]["all"]["kld"]["mean"]; assert 0.95 * a <= b <= a * (1 + 1e-12), (a, b)' "$T/direct.json" "$T/out"
expect 2 "--ref made with another window" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/text.txt" --ctx 16 --ref "$T/ref.npz"
ok "... naming the setting" -- grep -q "meta.json ctx is 32; this run's is 16" "$T/err"
expect 2 "--ref of another text" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --ctx 32 --ref "$T/ref.npz"
ok "... naming it" -- grep -q "meta.json text_sha256" "$T/err"
expect 2 "--save-ref and --ref together" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --save-ref "$T/x.npz" --ref "$T/ref.npz"

echo "# --baseline: each candidate against itself in an earlier result, position by position"
cp "$T/e2b-q4.gpk" "$T/cand"
expect 0 "a result to compare with later" -- "$G" eval "$T/e2b" "$T/cand" --text-file "$T/text.txt" --ctx 32 --json
cp "$T/out" "$T/base.json"
expect 0 "the same candidate again: every position equal, p = 1" -- "$G" eval "$T/e2b" "$T/cand" --text-file "$T/text.txt" --ctx 32 --baseline "$T/base.json" --json
ok "... in the JSON" -- test "$(jget '[d["candidates"][0]["baseline"][k] for k in ("positions_worse", "positions_better", "sign_test_p")]')" = "[0, 0, 1.0]"
cp "$T/e2b-qkm/model.gguf" "$T/cand" # the same path, a worse model
expect 1 "a worse candidate under the same path fails the sign test (exit 1)" -- "$G" eval "$T/e2b" "$T/cand" --text-file "$T/text.txt" --ctx 32 --baseline "$T/base.json" --json --report "$T/base.html"
ok "... the split and p computed independently (exact binomial)" -- $PY - "$T/out" "$T/base.json" <<'PY'
import json, sys
from math import comb
d, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
new, old = d["candidates"][0]["kld_per_position"], b["candidates"][0]["kld_per_position"]
up = sum(x > y for x, y in zip(new, old)); down = sum(x < y for x, y in zip(new, old)); n = up + down
p = min(1.0, 2 * sum(comb(n, i) for i in range(min(up, down) + 1)) / 2 ** n)
c = d["candidates"][0]
assert c["baseline"]["positions_worse"] == up and c["baseline"]["positions_better"] == down, (up, down)
assert abs(c["baseline"]["sign_test_p"] - p) <= 1e-9 * p, (c["baseline"]["sign_test_p"], p)
assert c["verdict"] == "fail" and any(f["metric"] == "baseline" for f in c["failures"])
PY
ok "... on the page" -- grep -q 'id="baseline"' "$T/base.html"
expect 2 "a baseline of other windows refused" -- "$G" eval "$T/e2b" "$T/cand" --text-file "$T/text.txt" --ctx 16 --baseline "$T/base.json"
ok "... naming them" -- grep -q "other windows (ctx, positions)" "$T/err"

echo "# convert --eval: the quality card's eval on the built-in sample"
expect 0 "convert --eval" -- "$G" convert "$T/e2b" --bits 4 --eval -o "$T/card.gpk"
expect 0 "inspect --json shows the card" -- "$G" inspect "$T/card.gpk" --json
card_sha=$(jget 'd["manifest"]["quality"]["sample"]["text_sha256"]')
ok "... with the sample's PPL ratio, KLD and windows" -- test "$(jget 'sorted(k for k in d["manifest"]["quality"]["sample"])')" = "['ctx', 'kld_mean', 'kld_p99', 'positions', 'ppl_ratio', 'text_sha256', 'top1', 'windows']"
expect 0 "eval of the same pair on the built-in sample" -- "$G" eval "$T/e2b" "$T/card.gpk" --ctx 128 --chunks 8 --json
ok "... the card names the built-in sample's text and agrees with eval" -- test "$card_sha,$(jget 'd["candidates"][0]["all"]["kld"]["mean"]')" = "$(jget 'd["text"]["sha256"]'),$("$G" inspect "$T/card.gpk" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["manifest"]["quality"]["sample"]["kld_mean"])')"
expect 0 "inspect's text" -- "$G" inspect "$T/card.gpk"
ok "... a line for the sample" -- grep -q "quality   on the built-in sample: PPL ratio" "$T/out"

echo "# thresholds, the built-in sample, errors"
expect 1 "a KLD threshold below the Q4_K_M candidate's fails (exit 1)" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" "$T/e2b-qkm/model.gguf" --text-file "$T/text.txt" --ctx 32 --kld-mean 1e-4 --json
ok "... the failing candidate named, the other passing" -- test "$(jget '[c["verdict"] for c in d["candidates"]]')" = "['pass', 'fail']"
expect 1 "--ppl-ratio 0.5 fails a candidate above it" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/text.txt" --ctx 32 --ppl-ratio 0.5
expect 2 "--ppl-ratio -1 refused" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --ppl-ratio -1
expect 0 "the built-in sample" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --ctx 32 --chunks 4 --json
ok "... named, with its sha256" -- test "$(jget 'd["text"]["source"], len(d["text"]["sha256"])')" = "('built-in sample', 64)"
printf '@@ category Prose\nshouting\n' >"$T/bad.txt"
expect 2 "a section name out of [a-z0-9_-] refused" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/bad.txt"
ok "... naming file, line and name" -- grep -q "bad.txt: line 1: section name 'Prose'" "$T/err"
printf 'a\xffb\n' >"$T/bin.txt"
expect 2 "text that is not UTF-8 refused" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/bin.txt"
expect 2 "fewer tokens than one window" -- "$G" eval "$T/e2b" "$T/e2b-q4.gpk" --text-file "$T/text.txt" --ctx 4096
ok "... saying so" -- grep -q "less than one window of 4096" "$T/err"
# a candidate whose tokenizer splits differently: one merge removed from its tokenizer.json
cp -r "$T/e2b" "$T/other"
$PY - "$T/other/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["model"]["merges"] = t["model"]["merges"][1:]
json.dump(t, open(sys.argv[1], "w"))
PY
expect 2 "a candidate whose tokenizer gives other ids stops the run" -- "$G" eval "$T/e2b" "$T/other" --text-file "$T/text.txt" --ctx 32
ok "... naming it and the first differing position" -- grep -q "other: its tokenizer and the reference's give different ids at position" "$T/err"

echo "# gates: what a golden and a check record, golden check --self-test, generation checks"
expect 0 "golden make from ids" -- "$G" golden make "$T/e2b" --tokens-file "$T/e2b/tokens.json" -o "$T/g.npz"
$PY - "$T/g.npz" "$T/e2b/tokenizer.json" >"$T/meta" <<'PY'
import hashlib, json, sys, zipfile
m = json.loads(zipfile.ZipFile(sys.argv[1]).read("meta.json"))
print(m["gempack_version"], m["numerics"], m["kernels"], m["tokenizer_sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(), m["template_sha256"], len(m["model_fingerprint"]))
PY
ok "... records gempack's version, numerics, kernels, the tokenizer's sha256 (hashlib) and the fingerprint" -- \
    grep -qE "^[0-9]+\.[0-9]+\.[0-9]+ [0-9]+ best True (None|[0-9a-f]{64}) 64$" "$T/meta"
expect 0 "golden check --self-test against the model itself" -- "$G" golden check "$T/e2b" "$T/g.npz" --self-test --json
cp "$T/out" "$T/st.json"
ok "... the perturbation caught by max_abs and top1, the check passing" -- \
    test "$(jget 'd["self_test"]["caught"], d["self_test"]["failed_on"], d["verdict"]')" = "(True, 'max_abs, top1', 'pass')"
ok "... position T/2, amount = the golden's margin there + 1 (recomputed from its logits)" -- $PY - "$T/g.npz" "$T/st.json" <<'PY'
import io, json, sys, zipfile
import numpy as np
z = zipfile.ZipFile(sys.argv[1]); d = json.load(open(sys.argv[2]))
x = np.load(io.BytesIO(z.read("logits.npy"))).astype(np.float64)
t = x.shape[0] // 2; r = np.sort(x[t])
assert d["self_test"]["position"] == t
assert abs(d["self_test"]["amount"] - (r[-1] - r[-2] + 1.0)) < 1e-5, (d["self_test"]["amount"], r[-1] - r[-2] + 1)
PY
ok "... records the model, the golden's producer and numerics, this build's" -- \
    test "$(jget 'len(d["measured"]["model"]["fingerprint"]), d["measured"]["golden"]["numerics"] == d["measured"]["numerics"] >= 9, d["measured"]["golden"]["producer"].startswith("gempack golden make")')" = "(64, True, True)"
expect 1 "--self-test with the gates off: not caught, so the check fails" -- "$G" golden check "$T/e2b" "$T/g.npz" --self-test --max-abs off --top1 off
ok "... saying the self-test was not caught" -- grep -q "FAIL (the self-test was not caught)" "$T/err"
expect 0 "--self-test of the committed reference golden (float64, NumPy)" -- "$G" golden check "$T/e2b" "$HERE/../golden/data/e2b-bf16.npz" --self-test

# generation checks, recomputed in Python from the generated ids and tokenizer.json's pieces
cat >"$T/gencheck.py" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1])); vocab = json.load(open(sys.argv[2]))["model"]["vocab"]
piece = {i: p for p, i in vocab.items()}
ids = d["generated"]; n = len(ids)
res = [i for i, x in enumerate(ids) if re.fullmatch(r"<unused[0-9]+>", piece.get(x, ""))]
best = None  # (length, -period, -start): a span of >= 16 ids and >= 4 periods, each id equal to the one `period` before
for p in range(1, 65):
    for s in range(n):
        e = s + p
        while e < n and ids[e] == ids[e - p]:
            e += 1
        e = min(e, n)
        if e - s >= 16 and e - s >= 4 * p and (best is None or (e - s, -p, -s) > best):
            best = (e - s, -p, -s)
want = {"reserved": {"count": len(res), "first_position": res[0] if res else None, "first_id": ids[res[0]] if res else None},
        "loop": {"start": -best[2], "period": -best[1], "length": best[0]} if best else None, "flagged": bool(res or best)}
assert d["generation_check"] == want, (d["generation_check"], want)
print("flagged" if want["flagged"] else "clean", "reserved" if res else "", "loop" if best else "")
PY
for s in 1 2 3 4 5 6 7 8; do
    "$G" run "$T/e2b" --tokens 2,17,99 --generate 40 --temperature 3 --seed $s --json >"$T/gen$s.json" 2>/dev/null
done
"$G" run "$T/e2b" --tokens 2,17,99 --generate 64 --json >"$T/gen0.json" 2>/dev/null
ok "generation checks of nine runs (greedy, then sampled) equal Python's on their ids" -- \
    sh -c 'for f in "$1"/gen*.json; do '$PY' "$1/gencheck.py" "$f" "$1/e2b/tokenizer.json" || exit 1; done >"$1/gen.txt"' sh "$T"
ok "... the greedy one a loop, among the others a reserved <unusedN> and a clean one" -- \
    sh -c 'head -1 "$1/gen.txt" | grep -q loop && grep -q reserved "$1/gen.txt" && grep -q clean "$1/gen.txt"' sh "$T"
expect 1 "run --check-generation: a loop fails the run (exit 1)" -- "$G" run "$T/e2b" --tokens 2,17,99 --generate 64 --check-generation
ok "... reported with the report" -- grep -q "generation check: a repetition loop: 64 tokens from generated position 0 repeat a span of 1" "$T/out"
finish
