# tiny_r1.sh - sourced by e2e scripts (not a test itself): unpack the trained
# tiny R1 (models/tiny-r1/tiny-r1.tar.zst, Hugging Face layout, FP8) into
# $TMPDIR/tiny-r1 and convert it to $R1M (weights as published). Defines
# tiny_r1_type TYPE: convert again with --type TYPE into $TMPDIR/tiny-r1-TYPE.dsr1.
# Exits the calling script with status 1 and a reason when a step fails.
R1M=${R1M:-$TMPDIR/tiny-r1.dsr1}
R1Z=models/tiny-r1/tiny-r1.tar.zst
[ -f "$R1Z" ] || { echo "$R1Z missing"; exit 1; }
zstd -dc "$R1Z" | tar -x -C "$TMPDIR" || { echo "cannot unpack $R1Z"; exit 1; }
"$DSR1" convert "$TMPDIR/tiny-r1" -o "$R1M" --quiet >/dev/null 2>&1 || { echo "convert failed"; exit 1; }
tiny_r1_type() {
    "$DSR1" convert "$TMPDIR/tiny-r1" -o "$TMPDIR/tiny-r1-$1.dsr1" --type "$1" --quiet \
        >/dev/null 2>&1 || { echo "convert --type $1 failed"; exit 1; }
}
