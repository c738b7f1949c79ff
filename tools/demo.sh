#!/bin/sh
# demo.sh - `make demo`: generate a small checkpoint in the real Hugging Face
# layout (random weights, the real DeepSeek-V3 tokenizer), convert it to one
# .dsr1 file, and answer the example prompt set with `dsr1 run`.
# The weights are random: the answers are nonsense by design. See README.md
# for running a real DeepSeek-R1 checkpoint.
set -e
cd "$(dirname "$0")/.."
dir=build/demo
mkdir -p "$dir"
if [ ! -f "$dir/ckpt/config.json" ]; then
    echo "== generating a small synthetic DeepSeek-V3-layout checkpoint in $dir/ckpt"
    build/gen_ckpt --preset small --tokenizer tests/fixtures/tokenizer --out "$dir/ckpt"
fi
if [ ! -f "$dir/demo.dsr1" ]; then
    echo "== dsr1 convert $dir/ckpt -o $dir/demo.dsr1"
    ./dsr1 convert "$dir/ckpt" -o "$dir/demo.dsr1"
fi
echo "== dsr1 info $dir/demo.dsr1"
./dsr1 info "$dir/demo.dsr1" | head -20
echo "== dsr1 run --in prompts/examples.jsonl   (random weights: expect nonsense)"
./dsr1 run -m "$dir/demo.dsr1" --in prompts/examples.jsonl --out "$dir/results.jsonl" --overwrite --max-tokens 32 --seed 1
cat "$dir/results.jsonl"
echo "== results in $dir/results.jsonl"
