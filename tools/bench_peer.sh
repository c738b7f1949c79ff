#!/bin/sh
# bench_peer.sh - `make bench-peer`: dsr1 against llama.cpp and ik_llama.cpp
# on this machine, on the same weights, interleaved, and the ratios.
#
#   LLAMA_SRC=/path/to/llama.cpp IK_SRC=/path/to/ik_llama.cpp tools/bench_peer.sh
#
# What it does, in order (each step skipped when its output exists):
#  1. builds llama-bench and llama-quantize of each source tree given in a
#     build folder of its own under $W (never inside the source tree), with
#     -DGGML_NATIVE=ON (ik_llama.cpp also -DGGML_IQK_FA_ALL_QUANTS=OFF: the
#     flash-attention kernels of every quant type take an hour to build on
#     two cores and these runs use F16 KV);
#  2. generates the r1-shape checkpoint (gen_ckpt --preset r1: R1's layer
#     shapes, 3 layers, 32 experts; ~13 GB of FP8) unless CKPT names one;
#  3. converts it, one type at a time, for dsr1 (`dsr1 convert --type T`)
#     and to the matching GGUF (tools/gguf_from_ckpt.py writes BF16, Q8_0
#     and Q4_0 from the same FP8 x block-scale values dsr1 starts from, with
#     ggml's reference quantisers; Q4=q4_k_m goes through BF16 and the
#     peers' llama-quantize):
#       dsr1 fp8, int8  vs  Q8_0       dsr1 int4  vs  Q4_0 (Q4=q4_k_m: Q4_K_M)
#       dsr1 bf16       vs  BF16
#     The 8- and 4-bit pairs keep LM heads at 8 bits (dsr1 INT8, GGUF Q8_0): the
#     FP8 file is converted with INT8 heads (FP8_HEAD=bf16: as published).
#  4. for each pair, ROUNDS rounds (default 3), each round running dsr1,
#     llama.cpp and ik_llama.cpp once in turn (interleaved: a burst of load
#     from other processes hits all three alike; each round starts with the
#     next engine, so each place in the order comes to each) with the same
#     threads:
#       dsr1 bench -m F --prompt 512,1 --gen 32 --batch 1 --threads T
#       llama-bench -m G -p 512 -n 32 -t T -r 1          (llama.cpp)
#       llama-bench -m G -p 512 -n 32 -t T -r 1 -mla 3 -fmoe 1   (ik_llama.cpp)
#     and prints the medians of prefill (pp512) and decode (tg32) tokens/s
#     and the ratios dsr1 / peer, with the CPU named; then each round's own
#     ratio (the three engines' runs of one round side by side): their
#     median and in how many rounds dsr1 was ahead; then dsr1 against each
#     peer within the machine's memory states (tools/peer_states.awk: a
#     `dsr1 bench membw` probe of a second before and after every run
#     labels it slow or fast spell). Decode is timed from
#     an empty context on every side: llama-bench's tg test starts at
#     position 0, so dsr1's comes from its 1-token prompt row (before
#     2026-11-27 it came from the 512-token row, attending to 512 more
#     positions per step than the peers, which understated dsr1's decode).
#
# Knobs: W (work folder, default build/peer; holds the 13 GB checkpoint and
# one pair at a time: at most ~19 GB more for fp8, 31 GB for bf16), TYPES
# (default "fp8 int8 int4"; bf16 needs memory for a BF16 model twice over,
# ~23 GB for this preset), THREADS (default 2), ROUNDS, PP (512), TG (32),
# CKPT, Q4 (q4_0), FP8_HEAD (int8; bf16 as published), KEEP=1 keeps the converted files (else each pair's files
# are deleted after its rounds), FP8_BF16 (1: the fp8 rounds also run the
# FP8 file with --fp8-prefill bf16, a "fp8-bf16" row against the same GGUF,
# what the default W8A8 prefill gains; 0: not).
# Either source may be left out; its columns are then "-".
# Prints the table to stdout and to $W/peer.txt; the raw runs go to
# $W/runs.txt ("engine type prefill decode round bw_before bw_after").
set -eu
DSR1=${DSR1:-./dsr1}
BUILD=${BUILD:-build}
W=${W:-$BUILD/peer}
TYPES=${TYPES:-fp8 int8 int4}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
PP=${PP:-512}
TG=${TG:-32}
Q4=${Q4:-q4_0}
PY=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W"
W=$(cd "$W" && pwd)
cp "$DSR1" "$W/dsr1.snapshot" # a rebuild during the run must not swap it out
DSR1=$W/dsr1.snapshot
REV=$(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo '?') # the snapshot's, not the end's
[ -z "$(git -C "$HERE/.." status --porcelain --untracked-files=no 2>/dev/null)" ] || REV="$REV+changes"
say() { echo "bench-peer: $*" >&2; }

# ---- 1. peers ----------------------------------------------------------------
build_peer() { # name src extra-cmake-args...
    name=$1 src=$2
    shift 2
    b=$W/build-$name
    if [ -x "$b/bin/llama-bench" ] && [ -x "$b/bin/llama-quantize" ]; then return 0; fi
    [ -f "$src/CMakeLists.txt" ] || { say "$name: $src is not a source tree (no CMakeLists.txt)"; exit 1; }
    say "building $name from $src in $b (takes a while on 2 cores)"
    nice -n 10 cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF "$@" >"$b.cmake.log" 2>&1 ||
        { say "$name: cmake failed, see $b.cmake.log"; exit 1; }
    nice -n 10 cmake --build "$b" -j"$(nproc)" --target llama-bench llama-quantize >"$b.build.log" 2>&1 ||
        { say "$name: build failed, see $b.build.log"; exit 1; }
}
LL= IK=
if [ -n "${LLAMA_SRC:-}" ]; then build_peer llama "$LLAMA_SRC"; LL=$W/build-llama/bin; fi
if [ -n "${IK_SRC:-}" ]; then build_peer ik "$IK_SRC" -DGGML_IQK_FA_ALL_QUANTS=OFF; IK=$W/build-ik/bin; fi
[ -n "$LL$IK" ] || say "note: neither LLAMA_SRC nor IK_SRC given: dsr1 alone"
QUANT=${LL:-$IK}/llama-quantize

# ---- 2./3. weights ------------------------------------------------------------
CKPT=${CKPT:-$W/ckpt-r1}
if [ ! -f "$CKPT/config.json" ]; then
    say "generating the r1-shape checkpoint into $CKPT"
    rm -rf "$CKPT.tmp"
    nice -n 10 "$BUILD/gen_ckpt" --out "$CKPT.tmp" --preset r1
    mv "$CKPT.tmp" "$CKPT"
fi
gguf_for() { # dsr1 type -> GGUF type
    case $1 in fp8 | int8) echo q8_0 ;; int4) echo "$Q4" ;; bf16) echo bf16 ;; esac
}
# FP8 keeps its LM heads as published (BF16) unless told; the Q8_0 GGUF
# has its head at Q8_0, so the FP8 file here carries INT8 heads (what
# `--type int8` gives them): both sides read 8-bit heads. FP8_HEAD=bf16
# compares the file as published instead.
dsr1_file() {
    f=$W/r1-$1.dsr1 ty=$1
    set -- --type "$ty"
    if [ "$ty" = fp8 ] && [ "${FP8_HEAD:-int8}" != bf16 ]; then
        f=$W/r1-fp8-head-${FP8_HEAD:-int8}.dsr1 # KEEP=1 files of other heads stay apart
        set -- "$@" --type-for "lm_head.weight=${FP8_HEAD:-int8}" \
            --type-for "*.shared_head.head.weight=${FP8_HEAD:-int8}"
    fi
    [ -f "$f" ] || nice -n 10 "$DSR1" convert "$CKPT" -o "$f" "$@" --threads "$THREADS" --quiet
    echo "$f"
}
# bf16, q8_0, q4_0: written directly from the checkpoint (no BF16 file on
# the way); other types (q4_k_m): BF16 first, then llama-quantize, then the
# BF16 file is deleted.
gguf_file() {
    q=$1 g=$W/r1-$1.gguf
    [ -f "$g" ] && { echo "$g"; return; }
    case $q in
    bf16 | q8_0 | q4_0)
        say "writing $g"
        nice -n 10 "$PY" "$HERE/gguf_from_ckpt.py" --type "$q" "$CKPT" "$g" ;;
    *)
        say "writing $W/r1-bf16.tmp.gguf, then llama-quantize $q"
        nice -n 10 "$PY" "$HERE/gguf_from_ckpt.py" "$CKPT" "$W/r1-bf16.tmp.gguf"
        nice -n 10 "$QUANT" "$W/r1-bf16.tmp.gguf" "$g" "$(echo "$q" | tr a-z A-Z)" "$THREADS" >"$g.log" 2>&1 ||
            { say "llama-quantize $q failed, see $g.log"; rm -f "$W/r1-bf16.tmp.gguf"; exit 1; }
        rm -f "$W/r1-bf16.tmp.gguf" ;;
    esac
    echo "$g"
}

# ---- 4. interleaved rounds -------------------------------------------------------
RUNS=$W/runs.txt
: >"$RUNS"
# Prefill from the PP-token row, decode from the 1-token row: llama-bench's
# tg test decodes from an empty context, so dsr1's decode is timed the same
# way (after its PP-token prompt each step would also attend to PP positions).
run_dsr1() { # file [flags] -> "pp tg"
    m=$1
    shift
    "$DSR1" bench -m "$m" --prompt "$PP,1" --gen "$TG" --batch 1 --threads "$THREADS" "$@" 2>/dev/null |
        awk -v p="$PP" '$1 == p && $2 == 1 && !pp { pp = $5 } $1 == 1 && $2 == 1 && !tg { tg = $7 }
            END { if (!pp || !tg) exit 1; print pp, tg }'
}
run_llama() { # bindir gguf extra... -> "pp tg"
    bin=$1 g=$2
    shift 2
    # a real CSV reader: ik_llama.cpp's rows hold quoted fields with commas
    "$bin/llama-bench" -m "$g" -p "$PP" -n "$TG" -t "$THREADS" -r 1 -o csv "$@" 2>/dev/null |
        "$PY" -c '
import csv, sys
pp = tg = None
for r in csv.DictReader(sys.stdin):
    if int(r["n_prompt"]) > 0: pp = r["avg_ts"]
    else: tg = r["avg_ts"]
if pp is None or tg is None: sys.exit(1)
print(pp, tg)'
}
uncache() { # files... -> their pages dropped from the page cache (best effort)
    "$PY" -c '
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$@" || say "could not drop $* from the page cache"
}
rotate() { # r words... -> the words, starting from word ((r - 1) mod count) + 1
    r=$1
    shift
    k=$(((r - 1) % $#))
    out=
    i=0
    for w in "$@"; do [ $i -ge $k ] && out="$out $w"; i=$((i + 1)); done
    i=0
    for w in "$@"; do [ $i -lt $k ] && out="$out $w"; i=$((i + 1)); done
    echo $out
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "-"; exit } print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
col() { awk -v e="$1" -v t="$2" -v k="$3" '$1 == e && $2 == t { print $k }' "$RUNS" | median |
    awk '{ if ($1 == "-") print; else printf "%.2f\n", $1 }'; }

# The machine's read bandwidth now (GB/s, or "-"): 256 MiB once per
# configuration, about a second. Taken before and after each run, so
# that tools/peer_states.awk can tell the memory spell the run had.
probe() { "$DSR1" bench membw --size 256 --reps 1 --threads "$THREADS" 2>/dev/null |
    awk '/streaming read/ && !v { v = $2 } END { print v ~ /^[0-9.]+$/ ? v : "-" }'; }

for t in $TYPES; do
    q=$(gguf_for "$t")
    f=$(dsr1_file "$t")
    g=
    [ -n "$LL$IK" ] && g=$(gguf_file "$q")
    say "$t vs $q: $ROUNDS interleaved rounds"
    # Both files leave the page cache first, so each engine reads its own
    # back through its mapping: files cached by write(2) (the converters')
    # stay in small folios, mapped with 4 KiB pages, while pages read
    # through a mapping can come in 2 MiB folios (ext4 from Linux 6.16),
    # which stream 15-20% faster. Then one untimed pass of dsr1 (llama-bench
    # runs its own warm-up before it times).
    uncache "$f" $g
    run_dsr1 "$f" >/dev/null || true
    for r in $(seq "$ROUNDS"); do
        # Each round starts with the next engine (round 1: dsr1, llama.cpp,
        # ik_llama.cpp; round 2: llama.cpp, ik_llama.cpp, dsr1; ...), so no
        # engine always runs first, right after the untimed pass or another
        # engine's run: each place in the order comes to each engine alike.
        for e in $(rotate "$r" dsr1 llama ik); do
            { [ $e = llama ] && [ -z "$LL" ]; } || { [ $e = ik ] && [ -z "$IK" ]; } && continue # not given
            b=$(probe)
            case $e in
            dsr1)
                x=$(run_dsr1 "$f") && echo "dsr1 $t $x $r $b $(probe)" >>"$RUNS" || say "dsr1 $t round $r failed"
                # the FP8 file again with its prefill in bf16, against the same GGUF rows
                if [ "$t" = fp8 ] && [ "${FP8_BF16:-1}" = 1 ]; then
                    b=$(probe)
                    x=$(run_dsr1 "$f" --fp8-prefill bf16) && echo "dsr1 fp8-bf16 $x $r $b $(probe)" >>"$RUNS" ||
                        say "dsr1 fp8 --fp8-prefill bf16 round $r failed"
                fi ;;
            llama)
                x=$(run_llama "$LL" "$g") && echo "llama $t $x $r $b $(probe)" >>"$RUNS" || say "llama.cpp $q round $r failed" ;;
            ik)
                x=$(run_llama "$IK" "$g" -mla 3 -fmoe 1) && echo "ik $t $x $r $b $(probe)" >>"$RUNS" || say "ik_llama.cpp $q round $r failed" ;;
            esac
        done
    done
    if [ -z "${KEEP:-}" ]; then
        rm -f "$f"
        [ -n "$g" ] && rm -f "$g"
    fi
done

# ---- table ---------------------------------------------------------------------
cpu=$("$DSR1" info --hw 2>/dev/null | awk -F': *' '/^cpu:/ { print $2; exit }')
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
# The rounds' own ratios (tools/peer_rounds.awk): dsr1's run of type $1
# against peer $2's run of type $3 in the same round, column $4: "median
# ahead/rounds". Each round's three runs share the machine's state of
# those minutes (its memory runs in slower and faster spells here, which
# move every engine's decode by up to 1.5x), so the median of the paired
# ratios is steadier than the ratio of two medians taken over different
# rounds; both are printed.
rounds() { awk -v t="$1" -v p="$2" -v pt="$3" -v k="$4" -f "$HERE/peer_rounds.awk" "$RUNS"; }
# The same within the machine's memory spells (tools/peer_states.awk):
# "slow R (N/M) fast R (N/M)", dsr1's median over the peer's in each.
states() { awk -v t="$1" -v p="$2" -v pt="$3" -v k="$4" -f "$HERE/peer_states.awk" "$RUNS"; }
# A row per type and column (prefill, decode) of fn's answers for dsr1
# against llama.cpp and against ik_llama.cpp, printed with fmt.
pair_rows() { # fn fmt
    for t in $(echo " $TYPES " | sed 's/ fp8 / fp8 fp8-bf16 /'); do
        [ "$t" = fp8-bf16 ] && [ "${FP8_BF16:-1}" != 1 ] && continue
        q=$(gguf_for "${t%-bf16}")
        for k in 3 4; do
            what=$([ $k = 3 ] && echo "pp$PP" || echo "tg$TG")
            # shellcheck disable=SC2059 # the format is the caller's
            printf "$2" "$what $t vs $q" "$("$1" "$t" llama "${t%-bf16}" $k)" "$("$1" "$t" ik "${t%-bf16}" $k)"
        done
    done
}
{
    echo "machine: ${cpu:-unknown CPU}, $(nproc) CPUs, $THREADS threads; medians of $ROUNDS interleaved rounds"
    echo "dsr1 $("$DSR1" --version 2>/dev/null | head -1) ($REV)" \
        "llama.cpp ${LLAMA_SRC:-(not run)} ik_llama.cpp ${IK_SRC:-(not run)} (ik: -mla 3 -fmoe 1)"
    heads=
    case " $TYPES " in *" fp8 "* | *" int8 "* | *" int4 "*)
        heads="dsr1 int8/int4 INT8, fp8 ${FP8_HEAD:-int8}; GGUF Q8_0/Q4_0 Q8_0" ;;
    esac
    case " $TYPES " in *" bf16 "*) heads="${heads:+$heads; }bf16: BF16 on every side" ;; esac
    echo "LM heads: $heads"
    printf '%-22s %8s %8s %8s %8s %8s\n' "tok/s" dsr1 llama ik dsr1/llama dsr1/ik
    for t in $(echo " $TYPES " | sed 's/ fp8 / fp8 fp8-bf16 /'); do
        [ "$t" = fp8-bf16 ] && [ "${FP8_BF16:-1}" != 1 ] && continue
        q=$(gguf_for "${t%-bf16}")
        for k in 3 4; do
            what=$([ $k = 3 ] && echo "pp$PP" || echo "tg$TG")
            d=$(col dsr1 "$t" $k) l=$(col llama "${t%-bf16}" $k) i=$(col ik "${t%-bf16}" $k)
            printf '%-22s %8s %8s %8s %8s %8s\n' "$what $t vs $q" "$d" "$l" "$i" "$(ratio "$d" "$l")" "$(ratio "$d" "$i")"
        done
    done
    echo "per round (each round's dsr1 / peer, then their median and the rounds dsr1 was ahead in):"
    printf '%-22s %14s %14s\n' "" "dsr1/llama" "dsr1/ik"
    pair_rows rounds '%-22s %14s %14s\n'
    thr=$(awk -v what=threshold -f "$HERE/peer_states.awk" "$RUNS")
    if [ "$thr" = - ]; then
        echo "by memory state (bench membw before and after each run: one state throughout):"
    else
        echo "by memory state (bench membw before and after each run: slow below $thr GB/s, fast above; a run across both left out):"
    fi
    printf '%-22s %-32s %s\n' "dsr1 / peer medians" "dsr1/llama (runs dsr1/llama)" "dsr1/ik (runs dsr1/ik)"
    pair_rows states '%-22s %-32s %s\n'
} | tee "$W/peer.txt"
