#!/bin/sh
# chat_tmux.sh - `dsr1 chat` in a real terminal (tmux): typing a question
# (reasoning streamed under a header, the limit noted), /set and /stats,
# a continued line, Ctrl-C in the middle of a long answer (back at the
# prompt, conversation goes on), /save + /reset + /load with the KV cache,
# /think hide, NO_COLOR, then Ctrl-C twice / Ctrl-D to leave.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }
S=dsr1-chat-$$
. tests/e2e/lib/tmux.sh
cleanup() { tmux_cleanup; }
trap cleanup EXIT

n=0
start() { # extra env and options; each start on a new private server (a killed one may linger a moment)
    cleanup
    n=$((n + 1))
    S=dsr1-chat-$$-$n
    mkdir -p "$TMPDIR/xdg"
    tmux new-session -d -s "$S" -x 120 -y 50 \
        "env XDG_DATA_HOME=$TMPDIR/xdg $1 $DSR1 chat -m $M --template r1 --temperature 0 $2; echo EXITED \$?; sleep 60"
}
# wait_count PATTERN N: until the screen holds N lines matching.
wait_count() {
    i=0
    while [ $i -lt 200 ]; do
        [ "$(screen | grep -c -- "$1")" -ge "$2" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    bad "timed out waiting for $2 x '$1'"
    screen | tail -n 15
    return 1
}

start "" "--max-tokens 100000"
wait_for 'Type a message' || exit 1
send "/set max_tokens 5" Enter
wait_for 'max_tokens = 5'
send "What is two plus two?" Enter
wait_for '\[max_tokens reached\]'
screen | grep -q '^thinking' || bad "no thinking header"
screen | grep -q -- '-- reasoning did not finish: 5 tokens' || bad "no unfinished-reasoning line"
send "/stats" Enter
wait_for 'answer 5 tokens (5 reasoning)'
# A continued line: the prompt changes to "... " and both lines are one turn.
send 'first line \' Enter
wait_for '^\.\.\.'
send "second line" Enter
wait_count '\[max_tokens reached\]' 2
send "/stats" Enter
wait_count 'reused from the cache' 2
screen | grep 'reused from the cache' | tail -n 1 | grep -q '(0 reused' && bad "KV cache not reused across turns"
# Ctrl-C in the middle of a long answer.
send "/set max_tokens 100000" Enter
send "Tell me everything." Enter
sleep 2
screen | tail -n 3 | grep -q '^>>> $' && bad "answer already over before Ctrl-C"
send C-c
wait_for '\[stopped\]'
sleep 0.3
screen | tail -n 1 | grep -q '^>>>' || bad "no prompt after Ctrl-C"
# Save, reset, load: the KV cache comes back.
send "/save $TMPDIR/conv.chat" Enter
wait_for "KV bytes to $TMPDIR/conv.chat"
send "/reset" Enter
wait_for 'conversation cleared'
send "/load $TMPDIR/conv.chat" Enter
wait_for 'messages and their KV cache'
send "/think hide" Enter "/set max_tokens 4" Enter "Again?" Enter
wait_for 'reasoning did not finish: 4 tokens'
wait_prompt
send C-d
wait_for 'EXITED 0'
# Colour by default on a terminal; none with NO_COLOR.
tmux capture-pane -p -e -t "$S" -S -200 | grep -q "$(printf '\033')\[2m" || bad "no dim reasoning on a terminal"

start "NO_COLOR=1" "--max-tokens 3"
wait_for 'Type a message' || exit 1
send "hi" Enter
wait_for '\[max_tokens reached\]'
tmux capture-pane -p -e -t "$S" -S -200 | grep -q "$(printf '\033')\[[0-9;]*m" && bad "colour despite NO_COLOR"
send C-c
wait_for 'Ctrl-C again'
send C-c
wait_for 'EXITED 0'
exit $fail
