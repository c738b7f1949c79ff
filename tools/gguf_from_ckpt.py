#!/usr/bin/python3
"""gguf_from_ckpt.py - a DeepSeek-V3/R1 Hugging Face checkpoint (FP8 with
128x128 block scales, or BF16) -> one BF16 GGUF for llama.cpp and
ik_llama.cpp, so `tools/bench_peer.sh` can run the peers on the very weights
dsr1 runs (their llama-quantize then makes Q8_0 / Q4_K_M / Q4_0 from it).

Why not the peers' convert_hf_to_gguf.py: it needs torch with float8 (not
in Debian 12), transformers and a real tokenizer, and holds the model in
memory; this needs only numpy, streams ~32 MB of rows at a time (peak memory a few
hundred MB) and writes the weights
dsr1 `convert --type bf16` writes: FP8 codes times their block scale,
rounded to the nearest BF16 (ties to even). Norms, the router and its bias
are F32, as the peers' converter keeps them.

What it does not do: the tokenizer. The GGUF gets a synthetic byte-level
BPE vocabulary of the checkpoint's size (256 byte tokens, a few merges,
fillers, BOS/EOS as DeepSeek numbers them): llama-bench feeds token ids,
so speed does not depend on it, but text generation with the file is
meaningless. The MTP layer is skipped (the peers do not run it).

Usage: gguf_from_ckpt.py [--type bf16|q8_0|q4_0] CKPT_DIR OUT.gguf

--type q8_0 / q4_0 write those ggml block formats directly (ggml's
reference quantisers, ported): no BF16 file twice their size on the way,
which on a shared disk matters (R1-shape: BF16 11.4 GB, Q8_0 6.1 GB, Q4_0
3.6 GB). Q4_0 keeps token_embd and output at Q8_0 (dsr1 --type int4 keeps
its head at INT8). Q4_K_M needs the peers' llama-quantize from BF16.
"""
import json
import os
import struct
import sys

import numpy as np

# GGUF value and tensor types (ggml.h / gguf docs)
U32, I32, F32V, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10
T_F32, T_Q4_0, T_Q8_0, T_BF16 = 0, 2, 8, 30
BLOCK = {T_F32: (1, 4), T_Q4_0: (32, 18), T_Q8_0: (32, 34), T_BF16: (1, 2)}  # elements, bytes
ALIGN = 32


def fp8_e4m3_table():
    t = np.zeros(256, np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = (m / 8.0) * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = -v if s else v
    return t


FP8 = fp8_e4m3_table()


class Ckpt:
    """The tensors of a safetensors checkpoint directory, memory-mapped."""

    def __init__(self, d):
        self.d, self.where = d, {}
        idx = os.path.join(d, "model.safetensors.index.json")
        files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
            else [f for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fp:
                n = struct.unpack("<Q", fp.read(8))[0]
                hdr = json.loads(fp.read(n))
            mm = np.memmap(p, np.uint8, "r")
            for k, v in hdr.items():
                if k != "__metadata__":
                    self.where[k] = (mm, 8 + n, v)

    def has(self, name):
        return name in self.where

    def shape(self, name):
        return tuple(self.where[name][2]["shape"])

    def f32(self, name, rows=None):
        """The tensor (or its rows [r0, r1)) as float32, FP8 dequantised with
        its block scales."""
        mm, base, v = self.where[name]
        a, b = v["data_offsets"]
        shape, dt = list(v["shape"]), v["dtype"]
        r0, r1 = rows if rows else (0, shape[0] if shape else 1)
        row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        es = {"F32": 4, "BF16": 2, "F8_E4M3": 1}.get(dt)
        if es is None:
            raise SystemExit("%s: tensor %s: dtype %s not supported" % (self.d, name, dt))
        raw = mm[base + a + r0 * row * es:base + a + r1 * row * es]
        out = [r1 - r0] + shape[1:] if shape else []
        if dt == "F32":
            return raw.view(np.float32).reshape(out).copy()
        if dt == "BF16":
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(out)
        w = FP8[raw].reshape(out)
        s = self.f32(name + "_scale_inv")[r0 // 128:(r1 + 127) // 128]
        s = np.repeat(np.repeat(s, 128, 0)[r0 % 128:r0 % 128 + (r1 - r0)], 128, 1)[:, :shape[1]]
        return w * s

    def chunks(self, name):
        """float32 pieces of the tensor in row order, ~32 MB each (rows in
        whole 128-row FP8 blocks), so memory stays small."""
        shape = self.shape(name)
        if len(shape) < 2:
            yield self.f32(name)
            return
        elems = int(os.environ.get("GGUF_CHUNK_ELEMS", 8 << 20))  # tests make it small
        step = max(128, elems // max(1, shape[1]) // 128 * 128)
        for r in range(0, shape[0], step):
            yield self.f32(name, (r, min(shape[0], r + step)))


def bf16(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def q8_0(x):
    """ggml's quantize_row_q8_0_ref: per 32 values d = amax / 127 (F16),
    codes round(x / d) half away from zero."""
    b = np.ascontiguousarray(x, np.float32).reshape(-1, 32)
    d = np.abs(b).max(axis=1) / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    v = b * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def q4_0(x):
    """ggml's quantize_row_q4_0_ref: per 32 values d = (the value of largest
    magnitude) / -8 (F16), codes min(15, trunc(x / d + 8.5)), value j in the
    low nibble of byte j and value j + 16 in its high nibble."""
    b = np.ascontiguousarray(x, np.float32).reshape(-1, 32)
    mx = b[np.arange(b.shape[0]), np.abs(b).argmax(axis=1)]
    d = mx / -8.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, np.trunc(b * inv[:, None] + 8.5)).astype(np.uint8)
    out = np.empty((b.shape[0], 18), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out


ENCODE = {T_F32: lambda x: np.ascontiguousarray(x, np.float32), T_BF16: bf16, T_Q8_0: q8_0, T_Q4_0: q4_0}


def plan(ck, cfg, wt):
    """(gguf name, numpy shape, type, producer) for every tensor, in order;
    matrices in wt (Q4_0 files keep the embeddings and the LM head at Q8_0,
    as dsr1 --type int4 keeps its head at INT8), vectors and the router F32."""
    out = []
    big = T_Q8_0 if wt == T_Q4_0 else wt

    def add(gname, hf, t=None):
        t = wt if t is None else t
        out.append((gname, ck.shape(hf), t, lambda: ck.chunks(hf)))

    add("token_embd.weight", "model.embed_tokens.weight", big)
    for i in range(cfg["num_hidden_layers"]):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        add(b + "attn_norm.weight", p + "input_layernorm.weight", T_F32)
        if cfg.get("q_lora_rank"):
            add(b + "attn_q_a.weight", p + "self_attn.q_a_proj.weight")
            add(b + "attn_q_a_norm.weight", p + "self_attn.q_a_layernorm.weight", T_F32)
            add(b + "attn_q_b.weight", p + "self_attn.q_b_proj.weight")
        else:
            add(b + "attn_q.weight", p + "self_attn.q_proj.weight")
        add(b + "attn_kv_a_mqa.weight", p + "self_attn.kv_a_proj_with_mqa.weight")
        add(b + "attn_kv_a_norm.weight", p + "self_attn.kv_a_layernorm.weight", T_F32)
        add(b + "attn_kv_b.weight", p + "self_attn.kv_b_proj.weight")
        add(b + "attn_output.weight", p + "self_attn.o_proj.weight")
        add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", T_F32)
        if i < cfg["first_k_dense_replace"]:
            for g, h in (("gate", "gate"), ("up", "up"), ("down", "down")):
                add(b + "ffn_%s.weight" % g, p + "mlp.%s_proj.weight" % h)
            continue
        add(b + "ffn_gate_inp.weight", p + "mlp.gate.weight", T_F32)
        if ck.has(p + "mlp.gate.e_score_correction_bias"):
            add(b + "exp_probs_b.bias", p + "mlp.gate.e_score_correction_bias", T_F32)
        E = cfg["n_routed_experts"]
        for g in ("gate", "up", "down"):
            names = [p + "mlp.experts.%d.%s_proj.weight" % (x, g) for x in range(E)]
            shape = (E,) + ck.shape(names[0])
            out.append((b + "ffn_%s_exps.weight" % g, shape, wt,
                        lambda names=names: (c for n in names for c in ck.chunks(n))))
        for g in ("gate", "up", "down"):
            add(b + "ffn_%s_shexp.weight" % g, p + "mlp.shared_experts.%s_proj.weight" % g)
    add("output_norm.weight", "model.norm.weight", T_F32)
    add("output.weight", "lm_head.weight", big)
    return out


def vocab(n):
    """Synthetic byte-level BPE vocabulary of n tokens (GPT-2 byte map)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    toks = [chr(c) for c in cs]
    merges = ["\u0120 t", "\u0120 a", "h e", "i n"]
    toks += [m.replace(" ", "") for m in merges]
    while len(toks) < n - 2:
        toks.append("<tok_%d>" % len(toks))
    toks += ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"]
    types = [1] * (n - 2) + [3, 3]
    return toks[:n], types[:n], merges


class Out:
    def __init__(self, f):
        self.f = f

    def raw(self, b):
        self.f.write(b)

    def u32(self, v):
        self.raw(struct.pack("<I", v))

    def u64(self, v):
        self.raw(struct.pack("<Q", v))

    def s(self, v):
        b = v.encode()
        self.u64(len(b))
        self.raw(b)

    def kv(self, key, t, v):
        self.s(key)
        self.u32(t)
        if t == STR:
            self.s(v)
        elif t == ARR:
            et, items = v
            self.u32(et)
            self.u64(len(items))
            for x in items:
                if et == STR:
                    self.s(x)
                else:
                    self.raw(struct.pack({I32: "<i", U32: "<I", F32V: "<f"}[et], x))
        else:
            self.raw(struct.pack({U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?", U64: "<Q"}[t], v))


def metadata(cfg, ftype):
    a = "deepseek2."
    rs = cfg.get("rope_scaling") or {}
    kv = [("general.architecture", STR, "deepseek2"), ("general.name", STR, "dsr1 bench checkpoint"),
          ("general.alignment", U32, ALIGN), ("general.file_type", U32, ftype),
          (a + "block_count", U32, cfg["num_hidden_layers"]),
          (a + "context_length", U32, cfg["max_position_embeddings"]),
          (a + "embedding_length", U32, cfg["hidden_size"]),
          (a + "feed_forward_length", U32, cfg["intermediate_size"]),
          (a + "attention.head_count", U32, cfg["num_attention_heads"]),
          (a + "attention.head_count_kv", U32, cfg.get("num_key_value_heads", cfg["num_attention_heads"])),
          (a + "rope.freq_base", F32V, float(cfg.get("rope_theta", 10000))),
          (a + "attention.layer_norm_rms_epsilon", F32V, float(cfg["rms_norm_eps"])),
          (a + "expert_used_count", U32, cfg["num_experts_per_tok"]),
          (a + "leading_dense_block_count", U32, cfg["first_k_dense_replace"]),
          (a + "vocab_size", U32, cfg["vocab_size"]),
          (a + "attention.kv_lora_rank", U32, cfg["kv_lora_rank"]),
          (a + "attention.key_length", U32, cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]),
          (a + "attention.value_length", U32, cfg["v_head_dim"]),
          (a + "expert_feed_forward_length", U32, cfg["moe_intermediate_size"]),
          (a + "expert_count", U32, cfg["n_routed_experts"]),
          (a + "expert_shared_count", U32, cfg["n_shared_experts"]),
          (a + "expert_weights_scale", F32V, float(cfg["routed_scaling_factor"])),
          (a + "expert_weights_norm", BOOL, bool(cfg["norm_topk_prob"])),
          (a + "expert_gating_func", U32, 2 if cfg.get("scoring_func") == "sigmoid" else 1),
          (a + "rope.dimension_count", U32, cfg["qk_rope_head_dim"])]
    if cfg.get("q_lora_rank"):
        kv.append((a + "attention.q_lora_rank", U32, cfg["q_lora_rank"]))
    if rs.get("type") == "yarn":
        kv += [(a + "rope.scaling.type", STR, "yarn"), (a + "rope.scaling.factor", F32V, float(rs["factor"])),
               (a + "rope.scaling.original_context_length", U32, rs["original_max_position_embeddings"]),
               (a + "rope.scaling.yarn_log_multiplier", F32V, 0.1 * float(rs["mscale_all_dim"]))]
    toks, types, merges = vocab(cfg["vocab_size"])
    kv += [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "deepseek-v3"),
           ("tokenizer.ggml.tokens", ARR, (STR, toks)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
           ("tokenizer.ggml.merges", ARR, (STR, merges)),
           ("tokenizer.ggml.bos_token_id", U32, len(toks) - 2),
           ("tokenizer.ggml.eos_token_id", U32, len(toks) - 1),
           ("tokenizer.ggml.add_bos_token", BOOL, True)]
    return kv


def main():
    types = {"bf16": (T_BF16, 32), "q8_0": (T_Q8_0, 7), "q4_0": (T_Q4_0, 2)}  # llama_ftype
    args = sys.argv[1:]
    wt, ftype = types["bf16"]
    if len(args) == 4 and args[0] == "--type" and args[1] in types:
        wt, ftype = types[args[1]]
        args = args[2:]
    if len(args) != 2:
        sys.exit("usage: gguf_from_ckpt.py [--type bf16|q8_0|q4_0] CKPT_DIR OUT.gguf")
    src, dst = args
    cfg = json.load(open(os.path.join(src, "config.json")))
    ck = Ckpt(src)
    tensors = plan(ck, cfg, wt)
    kv = metadata(cfg, ftype)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        o = Out(f)
        o.raw(b"GGUF")
        o.u32(3)
        o.u64(len(tensors))
        o.u64(len(kv))
        for k, t, v in kv:
            o.kv(k, t, v)
        off = 0
        for name, shape, t, _ in tensors:
            o.s(name)
            o.u32(len(shape))
            for d in reversed(shape):  # ggml: ne[0] is the innermost
                o.u64(d)
            o.u32(t)
            o.u64(off)
            n, bb = BLOCK[t]
            off += -(-int(np.prod(shape)) // n * bb // ALIGN) * ALIGN
        f.write(b"\0" * (-f.tell() % ALIGN))
        for name, shape, t, make in tensors:
            start = f.tell()
            for part in make():
                f.write(ENCODE[t](part).tobytes())
            f.write(b"\0" * (-(f.tell() - start) % ALIGN))
    os.replace(tmp, dst)


if __name__ == "__main__":
    main()
