#!/usr/bin/env python3
"""export.py - write the trained tiny R1 exactly as DeepSeek publishes R1.

Hugging Face layout: config.json (deepseek_v3 keys, fp8 quantization_config),
model.safetensors.index.json and two shards, tokenizer.json and
tokenizer_config.json. Projection weights are F8_E4M3 with an F32
weight_scale_inv [ceil(out/128), ceil(in/128)] (block amax / 448; partial
edge blocks); norms, embeddings, heads, the router and the MTP eh_proj are
BF16; e_score_correction_bias is F32. The MTP layer is model.layers.<L>
with its own copies of embed_tokens and shared_head.head. Vocabulary rows
the corpus never uses are zero.

Also writes the reference for tests/e2e/tiny_r1_logits.sh: this model's own
float32 logits (and MTP draft logits) computed in PyTorch from the exported
(dequantized) weights, on one held-out sequence, at the used ids.

Usage: export.py CKPT.pt HELD.tok.jsonl OUTDIR REFDIR [TOKENIZER_DIR]
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Cfg, TinyR1  # noqa: E402

TOKDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build/tiny-r1/tokenizer")


def e4m3_table():
    v = np.zeros(256, dtype=np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        x = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[c] = -x if s else x
    return v


E4M3 = e4m3_table()
POS = E4M3[:127]  # codes 0..126 increasing, 0x7e = 448 (0x7f is NaN)


def to_e4m3(x):
    """round to nearest, ties to even code; x float64 array, |x| <= 448"""
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(POS, a), 1, 126)
    lo = hi - 1
    dlo, dhi = a - POS[lo], POS[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = code.astype(np.uint8)
    neg = (x < 0) & (code != 0)
    return np.where(neg, code | 0x80, code).astype(np.uint8)


def fp8_quant(w):
    """w [out, in] float32 -> (codes uint8, scale_inv f32 [ceil/128...], dequant f32)"""
    w = w.astype(np.float64)
    o, i = w.shape
    bo, bi = -(-o // 128), -(-i // 128)
    sc = np.zeros((bo, bi), dtype=np.float32)
    q = np.zeros((o, i), dtype=np.uint8)
    deq = np.zeros((o, i), dtype=np.float32)
    for r in range(bo):
        for c in range(bi):
            blk = w[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128]
            amax = np.abs(blk).max()
            s = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
            codes = to_e4m3(blk / np.float64(s))
            q[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128] = codes
            deq[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128] = (E4M3[codes] * np.float64(s)).astype(np.float32)
            sc[r, c] = s
    return q, sc, deq


def bf16(w):
    """float32 -> (bf16 bits uint16, rounded float32), round to nearest even"""
    u = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    back = (r.astype(np.uint32) << 16).view(np.float32)
    return r, back


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes)"""
    hdr, off = {}, 0
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def config_json(c):
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": c.first_dense, "hidden_act": "silu", "hidden_size": c.hidden,
        "initializer_range": 0.02, "intermediate_size": c.inter, "kv_lora_rank": c.kv_lora,
        "max_position_embeddings": c.max_pos, "model_type": "deepseek_v3",
        "moe_intermediate_size": c.moe_inter, "moe_layer_freq": 1, "n_group": c.n_group,
        "n_routed_experts": c.experts, "n_shared_experts": c.shared, "norm_topk_prob": True,
        "num_attention_heads": c.heads, "num_experts_per_tok": c.topk,
        "num_hidden_layers": c.layers, "num_key_value_heads": c.heads,
        "num_nextn_predict_layers": 1, "q_lora_rank": c.q_lora, "qk_nope_head_dim": c.nope,
        "qk_rope_head_dim": c.rope,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": c.eps,
        "rope_scaling": {"beta_fast": c.beta_fast, "beta_slow": c.beta_slow,
                         "factor": c.yarn_factor, "mscale": 1.0,
                         "mscale_all_dim": c.mscale_all_dim,
                         "original_max_position_embeddings": c.yarn_orig, "type": "yarn"},
        "rope_theta": c.theta, "routed_scaling_factor": c.route_scale, "scoring_func": "sigmoid",
        "seq_aux": True, "tie_word_embeddings": False, "topk_group": c.topk_group,
        "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.46.3",
        "use_cache": True, "v_head_dim": c.vdim, "vocab_size": c.vocab}


def main():
    ck, held_path, out, refdir = sys.argv[1:5]
    tokdir = sys.argv[5] if len(sys.argv) > 5 else TOKDIR
    st = torch.load(ck)
    used = st["used"]
    c = Cfg()
    model = TinyR1(c, used)
    model.load_state_dict(st["model"])
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    V, D, L = c.vocab, c.hidden, c.layers
    deq = {}  # torch name -> float32 as exported (for the reference forward)
    shards = [[], []]

    def put(shard, name, key):
        w = sd[key]
        if w.ndim == 2 and not key.endswith(("gate.weight", "eh_proj.weight")) \
                and "embed" not in key and key != "head.weight":
            q, sc, dq = fp8_quant(w)
            shards[shard].append((name, "F8_E4M3", q.shape, q.tobytes()))
            shards[shard].append((name + "_scale_inv", "F32", sc.shape, sc.tobytes()))
            deq[key] = dq
        elif key.endswith("e_score_correction_bias"):
            shards[shard].append((name, "F32", w.shape, w.astype(np.float32).tobytes()))
            deq[key] = w
        else:
            b, back = bf16(w)
            shards[shard].append((name, "BF16", w.shape, b.tobytes()))
            deq[key] = back

    def put_vocab(shard, name, key):
        b, back = bf16(sd[key])
        full = np.zeros((V, D), dtype=np.uint16)
        full[np.array(used)] = b
        shards[shard].append((name, "BF16", (V, D), full.tobytes()))
        deq[key] = back

    def block(shard, prefix, mkey):
        for k in sorted(sd):
            if k.startswith(mkey + "."):
                put(shard, prefix + k[len(mkey) + 1:], k)

    put_vocab(0, "model.embed_tokens.weight", "embed.weight")
    for l in range(L):
        block(0, "model.layers.%d." % l, "blocks.%d" % l)
    put(1, "model.norm.weight", "norm.weight")
    put_vocab(1, "lm_head.weight", "head.weight")
    m = "model.layers.%d." % L
    b, _ = bf16(sd["embed.weight"])
    full = np.zeros((V, D), dtype=np.uint16)
    full[np.array(used)] = b
    shards[1].append((m + "embed_tokens.weight", "BF16", (V, D), full.tobytes()))
    put(1, m + "enorm.weight", "enorm.weight")
    put(1, m + "hnorm.weight", "hnorm.weight")
    put(1, m + "eh_proj.weight", "eh_proj.weight")
    block(1, m, "mtp_block")
    put(1, m + "shared_head.norm.weight", "mtp_norm.weight")
    b, _ = bf16(sd["head.weight"])
    full = np.zeros((V, D), dtype=np.uint16)
    full[np.array(used)] = b
    shards[1].append((m + "shared_head.head.weight", "BF16", (V, D), full.tobytes()))

    os.makedirs(out, exist_ok=True)
    wmap, total = {}, 0
    for i, s in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(out, fn), s)
        for name, _, _, data in s:
            wmap[name] = fn
            total += len(data)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(c), f, indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), os.path.join(out, fn))

    # reference logits from the exported weights
    for k, v in deq.items():
        sd[k] = v
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})
    model.eval()
    held = [json.loads(l) for l in open(held_path)]
    lut = {t: i for i, t in enumerate(used)}
    e = next(x for x in held if x["family"] == "add" and all(t in lut for t in x["ids"]))
    ids = e["ids"]
    x = torch.tensor([[lut[t] for t in ids]])
    with torch.no_grad():
        h = model.trunk(x, torch.ones_like(x, dtype=torch.bool))
        lg = model.logits(h)[0]
        hm = model.mtp(h[:, :-1], x[:, 1:], torch.ones_like(x[:, 1:], dtype=torch.bool))
        lg2 = model.logits(hm)[0]
    os.makedirs(refdir, exist_ok=True)
    with open(os.path.join(refdir, "ids.txt"), "w") as f:
        f.write(",".join(map(str, ids)) + "\n")
    with open(os.path.join(refdir, "used_ids.txt"), "w") as f:
        f.write(" ".join(map(str, used)) + "\n")
    lg.numpy().astype("<f4").tofile(os.path.join(refdir, "logits_used.f32"))
    lg2.numpy().astype("<f4").tofile(os.path.join(refdir, "mtp_logits_used.f32"))
    print("exported %d tensors, %d bytes; reference: %d positions x %d used ids"
          % (len(wmap), total, len(ids), len(used)))


if __name__ == "__main__":
    main()
