#!/bin/sh
# runner_tmp.sh - the test runner's per-script TMPDIR (tests/run.c): it
# goes as soon as the script passes or skips, a failed script's stays
# until the run ends, nothing is left after it, and DSR1_KEEP_TMP=1 keeps
# every one. Runs $BUILD/dsr1-test on stand-in scripts in a source tree
# of its own (the filter matches no unit test, so only they run).
set -u
fail=0
RUNNER=$BUILD/dsr1-test
[ -x "$RUNNER" ] || { echo "FAIL: $RUNNER not built"; exit 1; }
SRC=$TMPDIR/src
LOGDIR=$TMPDIR/log
export LOGDIR
mkdir -p "$SRC/tests/e2e" "$SRC/tests/fixtures" "$LOGDIR"
# each records its TMPDIR and leaves a file in it
cat >"$SRC/tests/e2e/zzq_a_pass.sh" <<'EOF'
echo "$TMPDIR" >"$LOGDIR/a"; : >"$TMPDIR/x"; exit 0
EOF
cat >"$SRC/tests/e2e/zzq_b_fail.sh" <<'EOF'
echo "$TMPDIR" >"$LOGDIR/b"; : >"$TMPDIR/x"; exit 1
EOF
cat >"$SRC/tests/e2e/zzq_c_skip.sh" <<'EOF'
echo "$TMPDIR" >"$LOGDIR/c"; : >"$TMPDIR/x"; echo "stand-in skip"; exit 77
EOF
# runs last: the passed and the skipped script's directories are gone,
# the failed one's is still there
cat >"$SRC/tests/e2e/zzq_d_check.sh" <<'EOF'
[ ! -e "$(cat "$LOGDIR/a")" ] || { echo "a passed script's TMPDIR was kept"; exit 1; }
[ ! -e "$(cat "$LOGDIR/c")" ] || { echo "a skipped script's TMPDIR was kept"; exit 1; }
[ -e "$(cat "$LOGDIR/b")/x" ] || { echo "a failed script's TMPDIR went before the end"; exit 1; }
exit 0
EOF

mkdir -p "$TMPDIR/base"
out=$(cd "$SRC" && env -u DSR1_KEEP_TMP TMPDIR="$TMPDIR/base" "$RUNNER" zzq_ 2>&1)
rc=$?
[ $rc = 1 ] || { echo "FAIL: runner exit $rc, want 1 (one script failed)"; fail=1; }
echo "$out" | grep -q "^ok   e2e/zzq_d_check.sh" || { echo "FAIL: the check script failed:"; echo "$out"; fail=1; }
[ "$(echo "$out" | tail -1)" = "2 passed, 1 failed, 1 skipped" ] ||
    { echo "FAIL: summary '$(echo "$out" | tail -1)'"; fail=1; }
[ -z "$(ls -A "$TMPDIR/base")" ] || { echo "FAIL: left behind: $(ls -A "$TMPDIR/base")"; fail=1; }

# DSR1_KEEP_TMP=1: every directory stays (the check script then fails)
rm -f "$LOGDIR"/*
(cd "$SRC" && DSR1_KEEP_TMP=1 TMPDIR="$TMPDIR/base" "$RUNNER" zzq_ >/dev/null 2>&1)
[ -e "$(cat "$LOGDIR/a")/x" ] && [ -e "$(cat "$LOGDIR/c")/x" ] ||
    { echo "FAIL: DSR1_KEEP_TMP=1 did not keep the passed and skipped scripts' directories"; fail=1; }
rm -rf "$TMPDIR/base"
exit $fail
