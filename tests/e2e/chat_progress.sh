#!/bin/sh
# chat_progress.sh - chat talks while it works, in a real terminal (tmux):
# a long piped prompt shows "prompt: N of M tokens, R tokens/s" on the
# terminal (seen in the pane's byte stream) and the line is gone once the
# answer starts; `--think collapse` in a 40-column window never leaves
# wrapped "thinking:" rows behind, also when the window is narrowed from
# 100 to 40 columns while it thinks; `/set` alone lists the settings; a
# conversation that fills the context says how to go on; the history
# directory is created.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }
S=dsr1-chatprog-$$
. tests/e2e/lib/tmux.sh
cleanup() { tmux_cleanup; }
trap cleanup EXIT
n=0
start() { # width, command; each on a new private server (a killed one may linger a moment)
    cleanup
    n=$((n + 1))
    S=dsr1-chatprog-$$-$n
    # one retry: on a loaded machine a new server has been seen to exit at start
    tmux new-session -d -s "$S" -x "$1" -y 40 "$2; echo EXITED \$?; sleep 60" ||
        { sleep 1; tmux new-session -d -s "$S" -x "$1" -y 40 "$2; echo EXITED \$?; sleep 60"; }
}
# narrow_held COLS: narrow the window with chat held still. tmux reflows the
# pane at once but tells the program (TIOCSWINSZ, then SIGWINCH) only later,
# batched; a line drawn in between is drawn for the old width on a screen
# already at the new one, which no program can erase right (make test saw a
# row left behind once in a few dozen runs). Held across the resize, chat
# sees it as a terminal that resizes at once shows it.
narrow_held() {
    pp=$(tmux display-message -p -t "$S" '#{pane_pid}')
    pid=$(awk -v pp="$pp" '$4 == pp { print $1 }' /proc/[0-9]*/stat 2>/dev/null | head -n 1)
    [ -n "$pid" ] || { bad "no chat process under the pane's shell $pp"; return 1; }
    kill -STOP "$pid"
    tmux resize-window -t "$S" -x "$1"
    sleep 1
    kill -CONT "$pid"
}
X=$TMPDIR/xdg/deeper # does not exist: chat must create it for the history
CHAT="env XDG_DATA_HOME=$X $DSR1 chat -m $M --template r1 --temperature 0"

# 1. Prompt progress on the terminal, erased when the answer starts. The
# prefill must outlast chat's 0.3 s before progress shows: 1,500 words
# (3,500 tokens) stopped doing so when the naive form's products got faster
# (236-355 ms on 2 threads), so about 4,700 of the tiny model's 5,120
# tokens on one thread (Zen 4: 620 ms, against 380 on 2), which leaves
# room for a faster machine.
python3 -c 'print(" ".join(["word%d" % i for i in range(2000)]))' >"$TMPDIR/long.txt"
: >"$TMPDIR/pane.log"
start 100 "sleep 0.5; $CHAT --threads 1 --max-tokens 2 <$TMPDIR/long.txt"
tmux pipe-pane -t "$S" -o "cat >>$TMPDIR/pane.log"
wait_for 'EXITED 0' 60
grep -q 'prompt: [0-9]* of [0-9]* tokens, [0-9]* tokens/s' "$TMPDIR/pane.log" ||
    bad "no prompt progress on the terminal"
screen | grep -q 'prompt: ' && bad "prompt progress left on the screen"
screen | grep -q 'reasoning did not finish: 2 tokens' || bad "no answer after the progress"

# 2. Collapse in 40 columns, and narrowed from 100 to 40 while thinking.
for w in 40 100; do
    start "$w" "$CHAT --think collapse --max-tokens 150"
    wait_for 'Type a message' || exit 1
    send "Think about it." Enter
    wait_for 'thinking: '
    [ "$w" = 100 ] && { sleep 0.5; narrow_held 40; }
    wait_for 'reasoning did not finish: 150 tokens' 60
    sleep 0.3
    n=$(screen | grep -c 'thinking: ')
    [ "$n" -eq 0 ] || { bad "width $w: $n 'thinking:' rows left behind"; screen | tail -n 8; }
    wait_prompt
    send C-d
    wait_for 'EXITED 0'
done

# 3. /set alone, a full context, the history directory.
start 100 "$CHAT --max-tokens 100000 --ctx 64"
wait_for 'Type a message' || exit 1
send "/set" Enter
wait_for 'repetition_penalty'
for k in temperature top_p top_k min_p seed max_tokens 'think (/think)'; do
    screen | grep -q "^  $k " || bad "/set does not list $k"
done
send "Go on and on." Enter
wait_for '\[context full\]'
wait_for 'fills the context of 64 tokens: /reset starts over'
send "$(python3 -c 'print(" ".join(["w%d" % i for i in range(80)]))')" Enter
wait_for 'does not fit the context of 64'
screen | grep -c 'fills the context of 64 tokens' | grep -q 2 || bad "no hint after a prompt too long"
send "/reset" Enter
wait_for 'conversation cleared'
wait_prompt
send C-d
wait_for 'EXITED 0'
[ -f "$X/dsr1/chat_history" ] || bad "history not kept in a new directory"
exit $fail
