# tmux.sh - sourced by the terminal tests (chat in a real tmux pane).
# Each run talks to a private tmux server named after its session, so other
# tests' servers never race with it. The caller sets S (the session name; it
# may change it later to start afresh) and defines bad() before using these.
command -v tmux >/dev/null || { echo "tmux not installed"; exit 77; }
export TMUX= # allow running inside tmux
tmux() { command tmux -L "$S" "$@"; }
tmux_cleanup() { tmux kill-server 2>/dev/null; }
# The pane's text (scrollback included), blank lines dropped.
screen() { tmux capture-pane -p -t "$S" -S -300 | grep -v '^ *$'; }
send() { tmux send-keys -t "$S" "$@"; }
# wait_for PATTERN [seconds]: poll the screen (default 30 s); on time-out
# report it with the screen's last lines and return 1.
wait_for() {
    _i=0
    while [ $_i -lt $((${2:-30} * 10)) ]; do
        screen | grep -q -- "$1" && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    bad "timed out waiting for '$1'"
    screen | tail -n 15
    return 1
}
# wait_prompt [seconds]: wait until the last line is chat's prompt again.
# A Ctrl-D typed while a turn is still generating reaches a terminal in
# canonical mode, where it is an empty line's end, not a byte: libedit never
# sees it, so the tests send it only at the prompt.
wait_prompt() {
    _i=0
    while [ $_i -lt $((${1:-30} * 10)) ]; do
        screen | tail -n 1 | grep -q '^>>>' && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    bad "timed out waiting for the prompt"
    screen | tail -n 15
    return 1
}
