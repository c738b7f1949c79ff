#!/bin/sh
# demo.sh - `make demo`: unpack the trained tiny DeepSeek-R1 checked into
# models/tiny-r1 (real DeepSeek-V3 architecture and Hugging Face FP8 layout,
# the real tokenizer and R1 chat template, trained on the synthetic tasks
# described in models/tiny-r1/README.md), convert it to one .dsr1 file, and
# answer the example prompt set (prompts/examples.jsonl) with `dsr1 run`,
# greedy, printing each reasoning apart from its answer.
# It answers its six task families right, alone or after earlier
# exchanges, except about 1 comparison in 10 whose numbers share the tens
# digit (models/tiny-r1/README.md).
set -e
cd "$(dirname "$0")/.."
dir=build/demo
mkdir -p "$dir"
if [ ! -f "$dir/tiny-r1/config.json" ] || [ models/tiny-r1/tiny-r1.tar.zst -nt "$dir/tiny-r1/config.json" ]; then
    echo "== unpacking models/tiny-r1/tiny-r1.tar.zst into $dir/tiny-r1"
    rm -rf "$dir/tiny-r1" "$dir/tiny-r1.dsr1"
    zstd -dc models/tiny-r1/tiny-r1.tar.zst | tar -x -C "$dir"
    touch "$dir/tiny-r1/config.json"
fi
if [ ! -f "$dir/tiny-r1.dsr1" ]; then
    echo "== dsr1 convert $dir/tiny-r1 -o $dir/tiny-r1.dsr1"
    ./dsr1 convert "$dir/tiny-r1" -o "$dir/tiny-r1.dsr1"
fi
echo "== dsr1 info $dir/tiny-r1.dsr1"
./dsr1 info "$dir/tiny-r1.dsr1" | head -20
echo "== dsr1 run -m $dir/tiny-r1.dsr1 --in prompts/examples.jsonl --temperature 0"
./dsr1 run -m "$dir/tiny-r1.dsr1" --in prompts/examples.jsonl --out "$dir/results.jsonl" --overwrite --temperature 0
echo
python3 tools/train/show.py prompts/examples.jsonl "$dir/results.jsonl"
echo "== raw results in $dir/results.jsonl"
echo "== chat with it (the six task families of models/tiny-r1/README.md; one question per turn works best):"
echo "   ./dsr1 chat -m $dir/tiny-r1.dsr1 --temperature 0"
