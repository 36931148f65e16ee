// Reference tokenization by Hugging Face's own tokenizers library (Rust, through the Node binding
// @anush008/tokenizers), for comparing eft's tokenizer against it.
//
//   node hf_tokenize.mjs NODE_MODULES TOKENIZER_JSON IN.jsonl OUT.jsonl [--add-special-tokens]
//     IN: {"text": ...} per line. OUT: {"ids": [...], "decoded": "..."} per line (decoded
//     without skipping special tokens).
//   node hf_tokenize.mjs NODE_MODULES TOKENIZER_JSON IN.jsonl --bench
//     Encodes all texts one by one, then as one string; prints {"bytes", "seconds_per_doc",
//     "seconds_whole"} (single-threaded: only encodeBatch uses several threads).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [modules, tokenizerFile, inFile, outFile, flag] = process.argv.slice(2);
const require = createRequire(path.join(modules, 'noop.js'));
const { Tokenizer } = require('@anush008/tokenizers');
const tokenizer = Tokenizer.fromFile(tokenizerFile);
const texts = fs.readFileSync(inFile, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l).text);

if (outFile === '--bench') {
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
  for (const t of texts.slice(0, 50)) await tokenizer.encode(t, null, { addSpecialTokens: false });  // warm up
  let t0 = process.hrtime.bigint();
  for (const t of texts) await tokenizer.encode(t, null, { addSpecialTokens: false });
  const perDoc = Number(process.hrtime.bigint() - t0) / 1e9;
  const whole = texts.join('\n');
  t0 = process.hrtime.bigint();
  const enc = await tokenizer.encode(whole, null, { addSpecialTokens: false });
  const wholeSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ bytes, tokens: enc.getIds().length, seconds_per_doc: perDoc, seconds_whole: wholeSeconds }));
} else {
  const addSpecialTokens = flag === '--add-special-tokens';
  const out = [];
  for (const t of texts) {
    const enc = await tokenizer.encode(t, null, { addSpecialTokens });
    const ids = enc.getIds();
    const decoded = await tokenizer.decode(ids, false);
    out.push(JSON.stringify({ ids, decoded }));
  }
  fs.writeFileSync(outFile, out.join('\n') + '\n');
}
