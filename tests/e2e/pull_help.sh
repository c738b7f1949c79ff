#!/bin/sh
# pull_help.sh - `dsr1 pull --help` and dsr1-pull(1) name the same options,
# `dsr1 --help` lists pull, and the README's "From Hugging Face to a chat"
# uses it.
set -u
MAN=man/dsr1-pull.1
fail=0
sed 's/\\//g' "$MAN" >"$TMPDIR/man" # \-\-jobs -> --jobs
"$DSR1" pull --help >"$TMPDIR/help" 2>&1 || { echo "FAIL: --help exit $?"; exit 1; }
for o in include dir jobs retries timeout quiet convert out type delete-source; do
    grep -q -- "--$o" "$TMPDIR/help" || { echo "FAIL: --help lacks --$o"; fail=1; }
    grep -q -- "--$o" "$TMPDIR/man" || { echo "FAIL: $MAN lacks --$o"; fail=1; }
done
for e in HF_TOKEN HF_TOKEN_PATH HF_ENDPOINT HF_HUB_CACHE HF_HOME https_proxy; do
    grep -q "$e" "$TMPDIR/help" || { echo "FAIL: --help lacks $e"; fail=1; }
    grep -q "$e" "$MAN" || { echo "FAIL: $MAN lacks $e"; fail=1; }
done
"$DSR1" --help | grep -q "^  pull  " || { echo "FAIL: dsr1 --help does not list pull"; fail=1; }
sed -n '/^## From Hugging Face to a chat/,/^## /p' README.md | grep -q "^dsr1 pull deepseek-ai/DeepSeek-R1" ||
    { echo "FAIL: README lacks the pull section"; fail=1; }
exit $fail
