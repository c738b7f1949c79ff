"""model.py - DeepSeek-V3 architecture in plain PyTorch, for training the tiny R1.

Written for this repository from DeepSeek-V3's inference/model.py semantics
(and dsr1's core/ as the spec it must match): MLA with q LoRA, YaRN RoPE with
the interleaved-pair rotation, a dense first layer then MoE layers with
sigmoid scoring, noaux_tc selection (group-limited by the sum of each group's
top-2 biased scores, then top-k; weights are the unbiased scores normalised,
times routed_scaling_factor), one shared expert, and one MTP (NextN) layer:
x = eh_proj([enorm(embed(t[i+1])) | hnorm(h[i])]), one block, shared_head.norm,
head, predicting t[i+2] from the main model's final-normed hidden state h[i].

Vocabulary: the model holds embedding and head rows only for the U ids the
corpus uses (`used` maps local row -> real id). The exported model has zero
rows for the other V-U ids, whose logits are therefore exactly 0; the loss
counts them in the partition function (logsumexp over the U logits and a
bucket of V-U logits equal to 0), so the full-vocabulary softmax of the
export is the one trained here.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cfg:
    def __init__(self, **kw):
        self.hidden = 128
        self.layers = 3  # main layers; the MTP layer is index `layers`
        self.first_dense = 1
        self.heads = 4
        self.q_lora = 96
        self.kv_lora = 64
        self.nope = 32
        self.rope = 16
        self.vdim = 32
        self.inter = 320
        self.moe_inter = 96
        self.experts = 8
        self.shared = 1
        self.topk = 2
        self.n_group = 4
        self.topk_group = 2
        self.route_scale = 2.5
        self.eps = 1e-6
        self.theta = 10000.0
        self.yarn_factor = 40.0
        self.yarn_orig = 4096
        self.max_pos = 163840
        self.beta_fast = 32
        self.beta_slow = 1
        self.mscale_all_dim = 1.0
        self.vocab = 129280
        self.__dict__.update(kw)


def rope_freqs(c):
    """core/rope.c dsr1_rope_freqs: float32 like the reference."""
    dim, half = c.rope, c.rope // 2
    f = 1.0 / (c.theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if c.max_pos > c.yarn_orig and c.yarn_factor != 1.0:
        def cdim(rot):
            return dim * math.log(c.yarn_orig / (rot * 2 * math.pi)) / (2 * math.log(c.theta))
        lo = max(math.floor(cdim(c.beta_fast)), 0)
        hi = min(math.ceil(cdim(c.beta_slow)), dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(half, dtype=torch.float32) - lo) / (hi - lo)).clamp(0, 1)
        smooth = 1 - ramp
        f = f / c.yarn_factor * (1 - smooth) + f * smooth
    return f


def softmax_scale(c):
    s = 1.0 / math.sqrt(c.nope + c.rope)
    if c.max_pos > c.yarn_orig and c.yarn_factor != 1.0:
        m = 0.1 * c.mscale_all_dim * math.log(c.yarn_factor) + 1.0
        s *= m * m
    return s


def apply_rope(x, cos, sin):
    """x [..., T, ..., rope] with pairs (2i, 2i+1) rotated; cos/sin broadcast."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        H = c.heads
        self.q_a_proj = lin(c.hidden, c.q_lora)
        self.q_a_layernorm = RMSNorm(c.q_lora, c.eps)
        self.q_b_proj = lin(c.q_lora, H * (c.nope + c.rope))
        self.kv_a_proj_with_mqa = lin(c.hidden, c.kv_lora + c.rope)
        self.kv_a_layernorm = RMSNorm(c.kv_lora, c.eps)
        self.kv_b_proj = lin(c.kv_lora, H * (c.nope + c.vdim))
        self.o_proj = lin(H * c.vdim, c.hidden)
        self.scale = softmax_scale(c)

    def forward(self, x, cos, sin, mask):
        c = self.c
        B, T, _ = x.shape
        H = c.heads
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, H, c.nope + c.rope)
        q_nope, q_pe = q.split([c.nope, c.rope], -1)
        q_pe = apply_rope(q_pe, cos[:, None], sin[:, None])
        kv = self.kv_a_proj_with_mqa(x)
        lat, k_pe = kv.split([c.kv_lora, c.rope], -1)
        k_pe = apply_rope(k_pe, cos, sin)  # [B, T, rope], shared by the heads
        kvb = self.kv_b_proj(self.kv_a_layernorm(lat)).view(B, T, H, c.nope + c.vdim)
        k_nope, v = kvb.split([c.nope, c.vdim], -1)
        s = torch.einsum("bthd,bshd->bhts", q_nope, k_nope)
        s = s + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        s = (s * self.scale).masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.einsum("bhts,bshd->bthd", s, v).reshape(B, T, H * c.vdim)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_proj = lin(d, inter)
        self.up_proj = lin(d, inter)
        self.down_proj = lin(inter, d)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.weight = nn.Parameter(torch.empty(c.experts, c.hidden))
        nn.init.normal_(self.weight, std=0.02)
        self.register_buffer("e_score_correction_bias", torch.zeros(c.experts))

    def forward(self, x):
        """x [N, D] -> (weights [N, k], indices [N, k])"""
        c = self.c
        scores = torch.sigmoid(x @ self.weight.t())
        with torch.no_grad():
            choice = scores + self.e_score_correction_bias
            if c.n_group > 1:
                g = choice.view(-1, c.n_group, c.experts // c.n_group)
                gs = g.topk(2, dim=-1).values.sum(-1)
                keep = gs.topk(c.topk_group, dim=-1).indices
                gm = torch.ones_like(gs, dtype=torch.bool).scatter_(1, keep, False)
                choice = choice.masked_fill(gm.repeat_interleave(c.experts // c.n_group, 1),
                                            float("-inf"))
            idx = choice.topk(c.topk, dim=-1).indices
        w = scores.gather(1, idx)
        w = w / w.sum(-1, keepdim=True) * c.route_scale
        return w, idx


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = Gate(c)
        self.experts = nn.ModuleList([MLP(c.hidden, c.moe_inter) for _ in range(c.experts)])
        self.shared_experts = MLP(c.hidden, c.moe_inter * c.shared)
        self.load = None  # tokens per expert in the last forward (for the bias update)

    def forward(self, x, valid):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, idx = self.gate(x)
        out = self.shared_experts(x)
        vflat = valid.reshape(-1)
        load = torch.zeros(self.c.experts)
        for e in range(self.c.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            load[e] = vflat[rows].sum()
            y = self.experts[e](x[rows]) * w[rows, slot, None]
            out = out.index_add(0, rows, y)
        self.load = load
        return out.view(shape)


class Block(nn.Module):
    def __init__(self, c, dense):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = MLA(c)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = MLP(c.hidden, c.inter) if dense else MoE(c)
        self.dense = dense

    def forward(self, x, cos, sin, mask, valid):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        h = self.post_attention_layernorm(x)
        return x + (self.mlp(h) if self.dense else self.mlp(h, valid))


class TinyR1(nn.Module):
    def __init__(self, c, used):
        super().__init__()
        self.c = c
        self.register_buffer("used", torch.tensor(used, dtype=torch.long))  # local -> real id
        U = len(used)
        self.embed = nn.Embedding(U, c.hidden)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.blocks = nn.ModuleList([Block(c, l < c.first_dense) for l in range(c.layers)])
        self.norm = RMSNorm(c.hidden, c.eps)
        self.head = lin(c.hidden, U)
        nn.init.normal_(self.head.weight, std=0.02)
        # MTP (NextN) layer; embed and head shared with the main model as in V3
        self.enorm = RMSNorm(c.hidden, c.eps)
        self.hnorm = RMSNorm(c.hidden, c.eps)
        self.eh_proj = lin(2 * c.hidden, c.hidden)
        self.mtp_block = Block(c, False)
        self.mtp_norm = RMSNorm(c.hidden, c.eps)
        self.register_buffer("freqs", rope_freqs(c))
        self.log_unused = math.log(c.vocab - U)

    def rope_tables(self, T):
        pos = torch.arange(T, dtype=torch.float32)
        a = pos[:, None] * self.freqs[None, :]
        # dsr1 evaluates cos/sin in double of the float32 angle
        return torch.cos(a.double()).float(), torch.sin(a.double()).float()

    def trunk(self, ids, valid):
        """ids [B, T] local ids -> final-normed hidden [B, T, D]"""
        T = ids.shape[1]
        cos, sin = self.rope_tables(T)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, cos, sin, mask, valid)
        return self.norm(x)

    def mtp(self, h, next_ids, valid):
        """h [B, T, D] main final-normed hidden at i; next_ids [B, T] = t[i+1]"""
        T = h.shape[1]
        cos, sin = self.rope_tables(T)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        x = self.eh_proj(torch.cat([self.enorm(self.embed(next_ids)), self.hnorm(h)], -1))
        x = self.mtp_block(x, cos, sin, mask, valid)
        return self.mtp_norm(x)

    def logits(self, h):
        return self.head(h)

    def full_logz(self, logits):
        """log partition over the whole vocabulary: U logits + (V-U) zeros."""
        b = torch.full(logits.shape[:-1] + (1,), self.log_unused)
        return torch.logsumexp(torch.cat([logits, b], -1), -1)

    def moe_layers(self):
        out = [b.mlp for b in self.blocks if not b.dense]
        return out + [self.mtp_block.mlp]
