// bench_hf.js REF [IDS] - HF tokenizers (npm `tokenizers`) on what bench_tokenizer.c times: the load of
// REF/gemma4/tokenizer.json and 1 MB and 10 MB one-piece texts (tests/tokenizer/one_piece.h's text), CPU time
// of the process. With IDS (tests/tokenizer/ids-1mb.txt.gz), also writes the 1 MB text's ids there (one line,
// with the post-processor's <bos>): test_tokenizer.c's reference for a long word.
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const ref = process.argv[2] || 'build-ref';
const idsOut = process.argv[3];
const { Tokenizer } = require(path.resolve(ref, 'npm/tokenizers_0.23.2/package'));
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
const wall = () => Number(process.hrtime.bigint()) / 1e6;
const units = ['tokenization', 'été', 'дан', '数据', '12345', '😀', '.'];
function onePiece(n) {
    const parts = [];
    let bytes = 0;
    for (let i = 0; ; i++) {
        const u = units[i % 7], l = Buffer.byteLength(u);
        if (bytes + l > n) break;
        parts.push(u);
        bytes += l;
    }
    return parts.join('');
}
(async () => {
    let c = cpu(), w = wall();
    const tok = Tokenizer.fromFile(path.join(ref, 'gemma4', 'tokenizer.json'));
    console.log(`HF load tokenizer.json: ${(cpu() - c).toFixed(0)} ms CPU, ${(wall() - w).toFixed(0)} ms wall`);
    for (const mb of [1, 10]) {
        const s = onePiece(mb << 20);
        c = cpu(); w = wall();
        const ids = (await tok.encode(s, null, { addSpecialTokens: true })).getIds();
        console.log(`HF encode ${mb} MB one piece: ${(cpu() - c).toFixed(0)} ms CPU, ${(wall() - w).toFixed(0)} ms wall, ${ids.length} ids`);
        if (mb === 1 && idsOut) {
            fs.writeFileSync(idsOut, zlib.gzipSync(Buffer.from(ids.join(' ') + '\n'), { level: 9 }));
            console.log(`bench_hf.js: ${idsOut}: ${ids.length} ids`);
        }
    }
})();
