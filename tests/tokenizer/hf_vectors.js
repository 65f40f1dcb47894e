// hf_vectors.js REF TOKENIZER_JSON - HF tokenizers (npm `tokenizers`, REF/npm) loads TOKENIZER_JSON and
// encodes llama.cpp's 46 Gemma 4 strings (REF/llama/ggml-vocab-gemma-4.gguf.inp, no special tokens);
// exit status 0 when every one gives the ids of REF/llama/ggml-vocab-gemma-4.gguf.out, else 1 with the
// first difference. Run by tests/test_tokenizer.c on the tokenizer.json gempack writes (tok_write_json).
const fs = require('fs');
const path = require('path');
const [ref, file] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(ref, 'npm/tokenizers_0.23.2/package'));
const inp = fs.readFileSync(path.join(ref, 'llama/ggml-vocab-gemma-4.gguf.inp'), 'utf8').split('\n__ggml_vocab_test__\n');
const out = fs.readFileSync(path.join(ref, 'llama/ggml-vocab-gemma-4.gguf.out'), 'utf8').split('\n');
(async () => {
    const tok = Tokenizer.fromFile(file);
    let ok = 0;
    for (let i = 0; i < inp.length; i++) {
        const got = (await tok.encode(inp[i], null, { addSpecialTokens: false })).getIds().join(' ');
        const want = out[i].trim().split(/\s+/).filter((s) => s.length).join(' ');
        if (got === want) ok++;
        else console.log(`string ${i}: ids ${got}, expected ${want}`);
    }
    console.log(`hf_vectors.js: ${ok} of ${inp.length} strings`);
    process.exit(ok === inp.length && inp.length === 46 ? 0 : 1);
})();
