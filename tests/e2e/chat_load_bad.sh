#!/bin/sh
# chat_load_bad.sh - `/load` of crafted and broken saves in a real terminal
# (tmux): each is refused with one line naming the file and the fault, the
# conversation in place is kept, and the chat goes on answering:
# a zstd bomb (2 GB of zeros in ~66 KB) declared as KV bytes, the same zeros
# behind a header that declares none, a tool role, a non-string content, a
# conversation longer than the context, a torn file. Then a valid one loads.
set -u
command -v zstd >/dev/null || { echo "zstd not installed"; exit 77; }
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }
S=dsr1-chatload-$$
. tests/e2e/lib/tmux.sh
cleanup() { tmux_cleanup; }
trap cleanup EXIT
D=$TMPDIR
save() { # NAME HEADER-JSON [zero bytes after]
    { printf 'DSR1CHAT 1\n%s\n' "$2"; [ -n "${3:-}" ] && head -c "$3" /dev/zero; } |
        zstd -q -1 -c >"$D/$1.chat"
}
save bomb '{"messages":[],"kv_bytes":2000000000}' 2000000000
size=$(wc -c <"$D/bomb.chat")
[ "$size" -lt 200000 ] || bad "the bomb is $size bytes, not a small file"
save extra '{"messages":[],"kv_bytes":0}' 100000000
save tool '{"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"x"}],"kv_bytes":0}'
save num '{"messages":[{"role":"user","content":5}],"kv_bytes":0}'
long=$(python3 -c 'print(" ".join(["word%d" % i for i in range(3000)]))')
save long "{\"messages\":[{\"role\":\"user\",\"content\":\"$long\"},{\"role\":\"assistant\",\"content\":\"ok\"}],\"kv_bytes\":0}"
save good '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}],"system":"Be brief.","kv_bytes":0}'
head -c 30 "$D/good.chat" >"$D/torn.chat"

# A 2 GB allocation would fail under this limit (the model maps ~270 MB);
# not under a sanitizer, which reserves terabytes of address space.
LIMIT="ulimit -v 1500000;"
[ -n "${DSR1_SANITIZED:-}" ] && LIMIT=
tmux new-session -d -s "$S" -x 160 -y 60 \
    "$LIMIT env XDG_DATA_HOME=$D/xdg $DSR1 chat -m $M --template r1 --temperature 0 --max-tokens 3 --ctx 2048; echo EXITED \$?; sleep 60"
wait_for 'Type a message' || exit 1
send "First." Enter
wait_for '\[max_tokens reached\]'
send "/load $D/bomb.chat" Enter
wait_for "bomb.chat: 2000000000 KV bytes, more than this context can hold"
send "/load $D/extra.chat" Enter
wait_for "extra.chat: more data than the header declares"
send "/load $D/tool.chat" Enter
wait_for "tool.chat: message 2: role is not \"user\" or \"assistant\"; not loaded"
send "/load $D/num.chat" Enter
wait_for "num.chat: message 1: content is not a string; not loaded"
send "/load $D/long.chat" Enter
wait_for "long.chat: the conversation takes [0-9]* tokens, more than the context of 2048"
send "/load $D/torn.chat" Enter
wait_for "torn.chat: .*truncated"
screen | grep -q '^loaded' && bad "a bad save was loaded"
# The conversation in place was kept: the next turn reuses its KV cache.
send "Second." Enter "/stats" Enter
wait_for 'reused from the cache'
screen | grep 'reused from the cache' | grep -q '(0 reused' && bad "conversation lost after refused loads"
send "/load $D/good.chat" Enter
wait_for 'loaded 2 messages'
send "Third." Enter
i=0
while [ "$(screen | grep -c 'max_tokens reached')" -lt 3 ] && [ $i -lt 200 ]; do
    sleep 0.1
    i=$((i + 1))
done
sleep 0.3
wait_prompt
send C-d
wait_for 'EXITED 0'
exit $fail
