// ref_ids.js REF CORPUS.json.gz - reference ids from HF tokenizers (npm `tokenizers`, REF/npm) for
// every corpus string, encoded with add_special_tokens (the post-processor's <bos>), by
//   REF/gemma4/tokenizer.json     -> ids-gemma4.txt.gz
//   REF/gemma4-24/tokenizer.json  -> ids-gemma4-24.txt.gz
// beside the corpus: one line per string, ids separated by spaces. Rerun after changing the corpus.
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const [ref, corpusFile] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(ref, 'npm/tokenizers_0.23.2/package'));
const corpus = JSON.parse(zlib.gunzipSync(fs.readFileSync(corpusFile)).toString('utf8'));
(async () => {
    for (const name of ['gemma4', 'gemma4-24']) {
        const tok = Tokenizer.fromFile(path.join(ref, name, 'tokenizer.json'));
        const lines = [];
        for (const text of corpus) lines.push((await tok.encode(text, null, { addSpecialTokens: true })).getIds().join(' '));
        const out = path.join(path.dirname(corpusFile), `ids-${name}.txt.gz`);
        fs.writeFileSync(out, zlib.gzipSync(Buffer.from(lines.join('\n') + '\n'), { level: 9 }));
        console.log(`ref_ids.js: ${out}: ${lines.length} strings`);
    }
})();
