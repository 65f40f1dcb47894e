// make_corpus.js OUT.json.gz - the tokenizer parity corpus (tests/test_tokenizer.c): hand-written
// strings in many scripts, emoji sequences, code, whitespace and newline runs, byte-fallback
// characters, special-token literals, then seeded random mixtures of them, then inputs over 100 KB.
// Deterministic: the same file every run (a fixed xorshift seed). No NUL bytes, no lone surrogates.
const fs = require('fs');
const zlib = require('zlib');

const scripts = [
    'Hello world', ' Hello World!', 'The quick brown fox jumps over the lazy dog.', 'Café crème brûlée, naïve façade, Ångström',
    'Über Größe äöü ß ÄÖÜ', 'Ça va? Très bien, merci.', 'Zażółć gęślą jaźń', 'Příliš žluťoučký kůň úpěl ďábelské ódy',
    'Привет, мир! Съешь же ещё этих мягких французских булок', 'Ελληνικά: Γειά σου Κόσμε', 'Українська мова: ґанок, їжак',
    'مرحبا بالعالم، كيف حالك؟', 'שלום עולם', 'नमस्ते दुनिया, आप कैसे हैं?', 'হ্যালো বিশ্ব', 'வணக்கம் உலகம்', 'నమస్కారం ప్రపంచం',
    'ಹಲೋ ವರ್ಲ್ಡ್', 'ഹലോ വേൾഡ്', 'ਸਤਿ ਸ੍ਰੀ ਅਕਾਲ', 'નમસ્તે', 'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง', 'ສະບາຍດີ', 'សួស្តីពិភពលោក',
    'გამარჯობა მსოფლიო', 'Բարեւ աշխարհ', 'ሰላም ልዑል', 'ཀུན་ལ་བཀྲ་ཤིས་བདེ་ལེགས།', 'ᠮᠣᠩᠭᠣᠯ', 'ආයුබෝවන්', 'မင်္ဂလာပါ',
    '你好，世界！今天天气很好。', '繁體中文測試：臺灣', '日本語のテキスト、カタカナとひらがな。', 'ｶﾀｶﾅ 半角', '안녕하세요 세계, 한국어 문장입니다.',
    'Tiếng Việt có dấu: Xin chào thế giới', 'Türkçe: İstanbul ılık şğü', 'Norsk: blåbærsyltetøy', 'Íslenska: þorn og eð',
    'ʻŌlelo Hawaiʻi', 'Yorùbá: Ẹ kú àárọ̀', 'isiZulu: Sawubona', 'Kiswahili: Habari ya asubuhi', 'Esperanto: ĉiuĵaŭde',
    'Ꭰ Ꭱ Ꭲ Cherokee', 'ᐃᓄᒃᑎᑐᑦ Inuktitut', 'Runic ᚠᚢᚦᚨᚱᚲ', 'Gothic 𐌰𐌱𐌲', 'Linear B 𐀀𐀁𐀂', 'Cuneiform 𒀀𒀁𒀂',
    'Egyptian 𓀀𓀁𓂀', 'Old Italic 𐌀𐌁𐌂', 'Math 𝔸𝔹ℂ 𝒜ℬ𝒞 𝐀𝐁𝐂 ∀x∈ℝ: x²≥0', '∑∏∫∂∇ ≤≥≠≈ ⊂⊃∪∩ ⇒⇔ ∞', '½ ¼ ¾ ⅓ ⅔ ⅛ № ℃ ℉ ™ © ®',
    'I\'ve been \'told\' he\'s here', 'ied 4 ½ months', 'Ääpfel', '3.14159 2,718 1e-10 0x1F 1_000_000', '$100 €50 £30 ¥1000 ₹500 ₿0.1',
];
const emoji = [
    '😀', '😂🤣', '👍🏻👍🏼👍🏽👍🏾👍🏿', '👨‍👩‍👧‍👦', '👩‍💻', '🏳️‍🌈', '🏴‍☠️', '🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷', '1️⃣2️⃣#️⃣', '❤️‍🔥', '🧑🏽‍🚀',
    '🫠🫡🫶', '🦄🐉🌍🌎🌏', '✨🎉🎊', '☕️ ☀️ ❄️', '🏊‍♀️🏋️‍♂️', '👁️‍🗨️', '🙇🏿‍♀️', '🤷‍♂️', '🇪🇺', '🏴󠁧󠁢󠁳󠁣󠁴󠁿',
];
const code = [
    'int main(void) {\n    printf("hello\\n");\n    return 0;\n}\n', 'def f(x):\n\treturn [i**2 for i in range(x) if i % 2]\n',
    'const f = async (a, b) => { await g(a ?? b); };', '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    '<html><head><title>T</title></head><body><table><tr><td>x</td></tr></table></body></html>',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;', '#!/bin/bash\nfor f in *.c; do gcc -O2 "$f"; done\n',
    'fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); }', 'regex: ^(?:[a-z0-9!#$%&\'*+/=?^_`{|}~-]+)@\\w+$',
    'x = a->b[i] << 3 | ~c && !d || e != f;', '    if (x) {\n        y();\n    }\n', '```python\nprint("hi")\n```',
    '<div class="row"><span style="color:red">red</span></div>', '<!-- comment --> <br/> &amp; &lt; &gt; &#x27;',
    '\\documentclass{article}\\begin{document}$E=mc^2$\\end{document}', 'https://example.com/path?q=1&r=two#frag',
    'user@example.org', 'C:\\Windows\\System32\\drivers\\etc\\hosts', 'a_b_c __init__ __name__ == "__main__"',
];
const spaces = [];
for (let n = 1; n <= 40; n++) spaces.push(' '.repeat(n));
for (let n = 1; n <= 35; n++) spaces.push('\n'.repeat(n));
for (let n = 1; n <= 35; n++) spaces.push('\t'.repeat(n));
spaces.push('\r\n', '\r\n\r\n', ' \n ', '\t \t', '\u00a0', '\u3000', '\u2003\u2009', '\u200b', '\u200d', '\ufeff', ' \n\n \t\n');
const bytesy = [
    '\u0001\u0002\u0003', '\u001b[31mred\u001b[0m', '\u007f', '\u0085', '\ue000\uf8ff', '\u{f0000}', '\u{10fffd}', '\ufffd',
    '\u{2a6d6}\u{20000}', 'a\u0301\u0302\u0303\u0304', 'Z̴̡̢̛͇͔͎̗͌̾a̶l̷g̸o̵', '\u{1d11e}', '\u{e0041}', '\ufdd0', '\u{1f9ff}\u{1fa70}',
    '\u0600\u0601', '\u2028\u2029', '\u{16a0}\u{16a1}', '\u{11000}\u{11001}', '\u{1e900}', '\u{10ffff}'.slice(0, 2),
];
const specials = ['<pad>', '<eos>', '<bos>', '<unk>', '<mask>', '[multimodal]', '<|turn>', '<turn|>', '<|tool>', '<tool|>',
    '<|tool_call>', '<tool_call|>', '<|tool_response>', '<tool_response|>', '<|"|>', '<|think|>', '<|channel>',
    '<channel|>', '<|image>', '<|audio>', '<|image|>', '<|audio|>', '<image|>', '<audio|>', '<|video|>', '<unused0>',
    '<unused5>', '<unused99>', '<unused6000>', '<table>', '<td>', '</td>', '<tr>', '<br>', '<h1>', '</div>', '<bos',
    '<|turn', 'turn|>', '<<bos>>', '<bos><bos>', '< bos>', '<start_of_turn>', '<end_of_turn>', '<start_of_image>'];
const words = ['the', 'of', 'and', 'tokenizer', 'Gemma', 'model', 'internationalization', 'a', 'I', 'über', 'données',
    'データ', '数据', 'данные', 'البيانات', 'naïveté', 'x', '42', '3.0', '-', '...', '!?', '—', '“quoted”', '«guillemets»'];

let s = 0x2545f4914f6cdd1dn;
const rnd = () => { s ^= s << 13n; s &= (1n << 64n) - 1n; s ^= s >> 7n; s ^= s << 17n; s &= (1n << 64n) - 1n; return Number(s >> 11n) / 2 ** 53; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const randCp = () => {
    const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x52f], [0x590, 0x6ff], [0x900, 0xdff], [0xe00, 0xeff],
        [0x1100, 0x11ff], [0x3040, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0x1f300, 0x1faff], [0x10000, 0x1ffff],
        [0xe000, 0xf8ff], [0x20000, 0x2a6df], [0x1, 0x1f]];
    const [a, b] = pick(ranges);
    return String.fromCodePoint(a + Math.floor(rnd() * (b - a + 1)));
};

const out = [];
const all = [scripts, emoji, code, spaces, bytesy, specials, words];
for (const list of all) for (const x of list) out.push(x);
for (const x of specials) out.push(' ' + x, x + ' ', 'text' + x + 'more', '\n' + x + '\n', x + x);
for (const x of scripts) out.push(' ' + x, x.toUpperCase(), x + '\n\n' + x);
for (const x of spaces) out.push('a' + x + 'b', x + 'x', 'x' + x);
while (out.length < 2400) {
    let t = '';
    const n = 1 + Math.floor(rnd() * 12);
    for (let i = 0; i < n; i++) {
        const r = rnd();
        t += r < 0.25 ? pick(words) : r < 0.4 ? pick(spaces) : r < 0.5 ? pick(emoji) : r < 0.6 ? pick(scripts)
            : r < 0.68 ? pick(specials) : r < 0.75 ? pick(code) : r < 0.82 ? pick(bytesy) : randCp() + randCp();
        if (rnd() < 0.5) t += ' ';
    }
    out.push(t);
}
// over 100 KB: prose, one long word, emoji, random code points, a whitespace run
let big = '';
while (big.length < 150000) big += pick(scripts) + pick([' ', '\n', '  ', '\n\n', '\t']) + pick(words) + ' ';
out.push(big);
let word = '';
while (word.length < 120000) word += pick('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'.split(''));
out.push(word);
out.push(emoji.join('').repeat(1500));
let mix = '';
while (mix.length < 110000) mix += randCp();
out.push(mix);
out.push(' '.repeat(60000) + '\n'.repeat(50000));
out.push(specials.join('').repeat(2000));
fs.writeFileSync(process.argv[2], zlib.gzipSync(Buffer.from(JSON.stringify(out), 'utf8'), { level: 9 }));
console.log(`make_corpus.js: ${out.length} strings`);
