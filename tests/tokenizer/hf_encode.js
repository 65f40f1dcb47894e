// hf_encode.js REF TOKENIZER_JSON STRINGS_JSON - HF tokenizers (npm `tokenizers`, REF/npm) loads
// TOKENIZER_JSON and prints, one line per string of the JSON array STRINGS_JSON, its ids with
// add_special_tokens (the post-processor's <bos>), separated by spaces. Run by tests/test_fixture.c on
// the fixtures' tokenizer.json.
const fs = require('fs');
const path = require('path');
const [ref, file, strings] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(ref, 'npm/tokenizers_0.23.2/package'));
(async () => {
    const tok = Tokenizer.fromFile(file);
    for (const s of JSON.parse(fs.readFileSync(strings, 'utf8')))
        console.log((await tok.encode(s, null, { addSpecialTokens: true })).getIds().join(' '));
})();
