#!/bin/sh
# gguf_from_ckpt.sh - tools/gguf_from_ckpt.py (make bench-peer's converter)
# on the tiny FP8 fixture: a GGUF v3 whose directory is consistent (tensor
# data aligned, the file exactly as long as the last tensor's end), the
# names and ggml shapes llama.cpp's deepseek2 loader asks for, the MTP layer
# left out, the routed experts stacked [E, out, in], and the weights those
# dsr1 --type bf16 would hold: every FP8 code times its block scale, rounded
# to BF16 (checked here against a decoder written independently of the
# tool's, on every element of an attention and an expert matrix).
set -u
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || { echo "python3-numpy not installed (tools/deps.sh installs it)"; exit 77; }
TOOL=$(dirname "$0")/../../tools/gguf_from_ckpt.py
CK=$FIXTURES/tiny/ckpt
# 128-row pieces: the multi-piece path (every R1 matrix takes it) on tiny shapes
GGUF_CHUNK_ELEMS=1 $PY "$TOOL" "$CK" "$TMPDIR/t.gguf" || { echo "FAIL: gguf_from_ckpt.py exit"; exit 1; }
$PY "$TOOL" "$CK" >/dev/null 2>&1 && { echo "FAIL: one argument accepted"; exit 1; }
$PY "$TOOL" --type q3 "$CK" "$TMPDIR/x.gguf" >/dev/null 2>&1 && { echo "FAIL: --type q3 accepted"; exit 1; }
for q in q8_0 q4_0; do
    GGUF_CHUNK_ELEMS=1 $PY "$TOOL" --type $q "$CK" "$TMPDIR/$q.gguf" || { echo "FAIL: --type $q exit"; exit 1; }
done
$PY - "$TMPDIR" "$CK" <<'PY' || exit 1
# Q8_0 / Q4_0 (ggml block formats: F16 d, then 32 int8 codes / 16 bytes of
# nibble pairs j, j + 16): decoded here, every value of an attention matrix
# within the format's error of FP8 x scale (half a step; Q4_0 clips the
# values of the opposite sign to the block's extreme: one step); the heads
# and embeddings of the Q4_0 file are Q8_0.
import json, os, struct, sys
import numpy as np
d, ck = sys.argv[1], sys.argv[2]
FP8 = np.array([(-1 if c >> 7 else 1) * ((c & 7) * 2.0 ** -9 if not (c >> 3) & 15 else (8 + (c & 7)) * 2.0 ** (((c >> 3) & 15) - 10)) for c in range(256)])
idx = json.load(open(os.path.join(ck, "model.safetensors.index.json")))["weight_map"]
def st(name):
    raw = open(os.path.join(ck, idx[name]), "rb").read()
    n = struct.unpack_from("<Q", raw)[0]; h = json.loads(raw[8:8 + n])[name]
    a, z = h["data_offsets"]; return h["shape"], raw[8 + n + a:8 + n + z]
sh, w = st("model.layers.0.self_attn.q_a_proj.weight"); _, s = st("model.layers.0.self_attn.q_a_proj.weight_scale_inv")
R, C = sh
sc = np.frombuffer(s, np.float32).reshape((R + 127) // 128, (C + 127) // 128)
ref = FP8[np.frombuffer(w, np.uint8)].reshape(R, C) * np.repeat(np.repeat(sc, 128, 0)[:R], 128, 1)[:, :C]
def tensors(path):
    b = open(path, "rb").read(); pos = [8]
    def take(f):
        v = struct.unpack_from(f, b, pos[0]); pos[0] += struct.calcsize(f); return v[0]
    def sv():
        n = take("<Q"); pos[0] += n; return b[pos[0] - n:pos[0]].decode()
    SZ = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    def val(t):
        if t == 8: return sv()
        if t == 9:
            et, n = take("<I"), take("<Q"); [val(et) for _ in range(n)]; return None
        return take(SZ[t])
    nt, nkv = take("<Q"), take("<Q")
    for _ in range(nkv): sv(); val(take("<I"))
    out = {}
    for _ in range(nt):
        name = sv(); nd = take("<I"); ne = [take("<Q") for _ in range(nd)]; out[name] = (ne, take("<I"), take("<Q"))
    return b, pos[0] + (-pos[0] % 32), out
fail = []
for q, tid, bb in (("q8_0", 8, 34), ("q4_0", 2, 18)):
    b, data, ts = tensors(os.path.join(d, q + ".gguf"))
    ne, t, off = ts["blk.0.attn_q_a.weight"]
    if t != tid: fail.append("%s: attn_q_a type %d" % (q, t)); continue
    blk = np.frombuffer(b, np.uint8, R * C // 32 * bb, data + off).reshape(-1, bb)
    dd = blk[:, :2].copy().view(np.float16).astype(np.float64).reshape(-1)
    if tid == 8:
        v = blk[:, 2:].view(np.int8).astype(np.float64) * dd[:, None]; tol = 0.6
    else:
        lo, hi = blk[:, 2:] & 15, blk[:, 2:] >> 4
        v = (np.concatenate([lo, hi], axis=1).astype(np.float64) - 8) * dd[:, None]; tol = 1.01
    err = np.abs(v.reshape(R, C) - ref) - tol * np.abs(dd).repeat(32).reshape(R, C)
    if (err > 1e-12).any(): fail.append("%s: %d values beyond the format's error" % (q, int((err > 1e-12).sum())))
    if q == "q4_0":
        for n in ("output.weight", "token_embd.weight"):
            if ts[n][1] != 8: fail.append("q4_0: %s type %d, want Q8_0" % (n, ts[n][1]))
for f in fail: print("FAIL:", f)
sys.exit(1 if fail else 0)
PY
exec $PY - "$TMPDIR/t.gguf" "$CK" <<'PY'
import json, os, struct, sys
gg, ck = sys.argv[1], sys.argv[2]
b = open(gg, "rb").read()
pos = 0
def take(fmt):
    global pos
    v = struct.unpack_from(fmt, b, pos); pos += struct.calcsize(fmt); return v[0]
def string():
    global pos
    n = take("<Q"); s = b[pos:pos + n].decode(); pos += n; return s
SIZES = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
def value(t):
    if t == 8: return string()
    if t == 9:
        et, n = take("<I"), take("<Q"); return [value(et) for _ in range(n)]
    return take(SIZES[t])
fail = []
assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3, "not GGUF v3"
pos = 8
nt, nkv = take("<Q"), take("<Q")
kv = {}
for _ in range(nkv):
    k = string(); kv[k] = value(take("<I"))
tensors = {}
for _ in range(nt):
    name = string(); nd = take("<I"); ne = [take("<Q") for _ in range(nd)]; t = take("<I"); off = take("<Q")
    tensors[name] = (ne, t, off)
data = pos + (-pos % 32)
cfg = json.load(open(os.path.join(ck, "config.json")))
L, E, V, H = cfg["num_hidden_layers"], cfg["n_routed_experts"], cfg["vocab_size"], cfg["hidden_size"]
if kv.get("general.architecture") != "deepseek2": fail.append("architecture %r" % kv.get("general.architecture"))
if kv.get("deepseek2.block_count") != L: fail.append("block_count")
if kv.get("deepseek2.expert_count") != E: fail.append("expert_count")
if len(kv.get("tokenizer.ggml.tokens", [])) != V: fail.append("vocabulary size")
end = 0
for name, (ne, t, off) in tensors.items():
    n = 1
    for d in ne: n *= d
    size = n * (2 if t == 30 else 4)
    if off % 32: fail.append(name + ": unaligned")
    end = max(end, data + off + size + (-size % 32))
if end != len(b): fail.append("file is %d bytes, directory says %d" % (len(b), end))
want = {"token_embd.weight": [H, V], "output.weight": [H, V], "blk.0.attn_q_a.weight": None,
        "blk.%d.ffn_gate_exps.weight" % (L - 1): [H, cfg["moe_intermediate_size"], E]}
for name, ne in want.items():
    if name not in tensors: fail.append(name + " missing")
    elif ne and tensors[name][0] != ne: fail.append("%s: ne %s, want %s" % (name, tensors[name][0], ne))
if any(k.startswith("blk.%d." % L) for k in tensors): fail.append("the MTP layer was written")
# An independent FP8 decoder: frexp-free bit arithmetic on the code.
def e4m3(c):
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    v = m * 2.0 ** -9 if e == 0 else (8 + m) * 2.0 ** (e - 10)
    return -v if s else v
def bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
idx = json.load(open(os.path.join(ck, "model.safetensors.index.json")))["weight_map"]
def st(name):
    f = os.path.join(ck, idx[name]); raw = open(f, "rb").read()
    n = struct.unpack_from("<Q", raw)[0]; h = json.loads(raw[8:8 + n])[name]
    a, z = h["data_offsets"]; return h, raw[8 + n + a:8 + n + z]
def check(hf, gname, expert=None):
    h, w = st(hf); sh, s = st(hf + "_scale_inv")
    R, C = h["shape"]; sc = struct.unpack("<%df" % (len(s) // 4), s); scols = sh["shape"][1]
    ne, t, off = tensors[gname]
    base = data + off + (expert or 0) * R * C * 2
    got = struct.unpack_from("<%dH" % (R * C), b, base)
    bad = 0
    for r in range(R):
        for c in range(C):
            x = e4m3(w[r * C + c]) * sc[(r // 128) * scols + c // 128]
            bad += bf16_bits(struct.unpack("<f", struct.pack("<f", x))[0]) != got[r * C + c]
    if bad: fail.append("%s: %d of %d values differ from FP8 x scale in BF16" % (gname, bad, R * C))
check("model.layers.0.self_attn.q_a_proj.weight", "blk.0.attn_q_a.weight")
check("model.layers.%d.mlp.experts.3.down_proj.weight" % (L - 1), "blk.%d.ffn_down_exps.weight" % (L - 1), 3)
for f in fail: print("FAIL:", f)
sys.exit(1 if fail else 0)
PY
