#!/usr/bin/env python3
"""train.py - train the tiny R1 (tools/train/model.py) on the prep.py corpus.

Loss: next-token cross-entropy over the assistant completion (full-vocabulary
softmax, see model.py) plus 0.3 x the MTP loss (token after next), as
DeepSeek-V3 trains its MTP module. Expert balance: V3's auxiliary-loss-free
bias update after every step (bias += gamma * sign(mean load - load)).
Batches are buckets of similar length. Checkpoints every --ckpt-every steps
(resumes from OUT/ckpt.pt); the loss curve and held-out completion accuracy
go to OUT/log.jsonl.

Usage: train.py --train T.tok.jsonl --held H.tok.jsonl --out DIR --steps N
       [--seed 1] [--batch-tokens 4096] [--lr 3e-3] [--threads 2]
"""
import argparse
import json
import math
import os
import random
import time

# libgomp threads spin while waiting; on a shared machine that costs 5x
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
import torch  # noqa: E402

from model import Cfg, TinyR1  # noqa: E402


def load(path):
    return [json.loads(l) for l in open(path, encoding="utf-8")]


def make_batches(ex, batch_tokens, rng):
    order = sorted(range(len(ex)), key=lambda i: (len(ex[i]["ids"]), rng.random()))
    batches, cur, width = [], [], 0
    for i in order:
        L = len(ex[i]["ids"])
        if cur and max(width, L) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, L)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def tensors(ex, idxs, lut):
    T = max(len(ex[i]["ids"]) for i in idxs)
    ids = torch.zeros(len(idxs), T, dtype=torch.long)
    lossm = torch.zeros(len(idxs), T, dtype=torch.bool)  # position predicts a completion token
    valid = torch.zeros(len(idxs), T, dtype=torch.bool)
    for r, i in enumerate(idxs):
        s = ex[i]["ids"]
        ids[r, :len(s)] = torch.tensor([lut[t] for t in s])
        valid[r, :len(s)] = True
        lossm[r, ex[i]["n_prompt"] - 1:len(s) - 1] = True
    return ids, valid, lossm


def losses(model, ids, valid, lossm):
    h = model.trunk(ids, valid)
    lg = model.logits(h[:, :-1])
    tgt = ids[:, 1:]
    m = lossm[:, :-1]
    nll = model.full_logz(lg) - lg.gather(-1, tgt[..., None])[..., 0]
    main = nll[m].mean()
    acc = (lg.argmax(-1) == tgt)[m].float().mean()
    # MTP: from h[i] and embed(t[i+1]) predict t[i+2]
    hm = model.mtp(h[:, :-1], ids[:, 1:], valid[:, 1:])
    lg2 = model.logits(hm[:, :-1])
    tgt2 = ids[:, 2:]
    m2 = lossm[:, 1:-1]
    nll2 = model.full_logz(lg2) - lg2.gather(-1, tgt2[..., None])[..., 0]
    mtp = nll2[m2].mean()
    mtp_acc = (lg2.argmax(-1) == tgt2)[m2].float().mean()
    return main, mtp, acc, mtp_acc


@torch.no_grad()
def greedy_exact(model, ex, lut, n_per_family):
    """Fraction of held-out completions reproduced exactly by greedy decoding
    over the full vocabulary (an unused id wins when every used logit < 0)."""
    model.eval()
    fams = {}
    for e in ex:
        fams.setdefault(e["family"], [])
        if len(fams[e["family"]]) < n_per_family:
            fams[e["family"]].append(e)
    out = {}
    for f, es in fams.items():
        ok = 0
        for e in es:
            s = [lut[t] for t in e["ids"][:e["n_prompt"]]]
            want = [lut[t] for t in e["ids"][e["n_prompt"]:]]
            good = True
            for k in range(len(want)):  # stops at the first wrong token
                x = torch.tensor([s + want[:k]])
                lg = model.logits(model.trunk(x, torch.ones_like(x, dtype=torch.bool))[:, -1])[0]
                t = int(lg.argmax())
                if float(lg[t]) < 0 or t != want[k]:
                    good = False
                    break
            ok += good
        out[f] = ok / len(es)
    model.train()
    return out


def bias_update(model, gamma):
    for moe in model.moe_layers():
        load = moe.load
        if load is None or load.sum() == 0:
            continue
        moe.gate.e_score_correction_bias += gamma * torch.sign(load.mean() - load)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--held", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--bias-gamma", type=float, default=1e-3)
    ap.add_argument("--exact-n", type=int, default=3)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    tr, held = load(a.train), load(a.held)
    ck = os.path.join(a.out, "ckpt.pt")
    st = torch.load(ck) if os.path.exists(ck) else None
    # a resumed phase keeps the checkpoint's vocabulary rows (a later phase's
    # corpus may lack a token or add one: such examples are left out)
    used = st["used"] if st else sorted({t for e in tr for t in e["ids"]})
    lut = {t: i for i, t in enumerate(used)}
    out = {}
    for e in tr:
        if not all(t in lut for t in e["ids"]):
            out[e["family"]] = out.get(e["family"], 0) + 1
    if out:  # said per family: a whole family left out is easy to miss
        tr = [e for e in tr if all(t in lut for t in e["ids"])]
        print("left out training examples with tokens outside the vocabulary rows: " +
              ", ".join("%s %d" % kv for kv in sorted(out.items())), flush=True)
    held = [e for e in held if all(t in lut for t in e["ids"])]
    cfg = Cfg()
    model = TinyR1(cfg, used)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    step, t_used = 0, 0.0
    if st:
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, t_used = st["step"], st["time"]
        rng.setstate(st["rng"])
        torch.set_rng_state(st["torch_rng"])
        print("resumed at step", step, flush=True)
    n_params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "head" not in n)
    print("params (outside vocabulary rows): %d, used vocab %d" % (n_params, len(used)), flush=True)
    log = open(os.path.join(a.out, "log.jsonl"), "a")
    batches = []
    warm = min(100, a.steps // 10)
    hb = make_batches(held, a.batch_tokens, random.Random(0))[:8]
    t0 = time.time()
    while step < a.steps:
        if not batches:
            batches = make_batches(tr, a.batch_tokens, rng)
        idxs = batches.pop()
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        main_l, mtp_l, acc, macc = losses(model, *tensors(tr, idxs, lut))
        loss = main_l + a.mtp_weight * mtp_l
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            bias_update(model, a.bias_gamma)
        step += 1
        if step % 10 == 0:
            el = t_used + time.time() - t0
            rec = {"step": step, "time_s": round(el, 1), "lr": lr, "loss": round(main_l.item(), 4),
                   "mtp_loss": round(mtp_l.item(), 4), "acc": round(acc.item(), 4),
                   "mtp_acc": round(macc.item(), 4)}
            if step % a.eval_every == 0 or step == a.steps:
                rec["expert_load"] = [m.load.tolist() for m in model.moe_layers()]
                rec["expert_bias"] = [[round(x, 4) for x in m.gate.e_score_correction_bias.tolist()]
                                      for m in model.moe_layers()]
                with torch.no_grad():
                    model.eval()
                    hl = [losses(model, *tensors(held, b, lut)) for b in hb]
                    model.train()
                rec["held_loss"] = round(sum(x[0].item() for x in hl) / len(hl), 4)
                rec["held_acc"] = round(sum(x[2].item() for x in hl) / len(hl), 4)
                rec["held_mtp_acc"] = round(sum(x[3].item() for x in hl) / len(hl), 4)
                rec["held_exact"] = greedy_exact(model, held, lut, a.exact_n)
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % a.ckpt_every == 0 or step == a.steps:
            tmp = ck + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "time": t_used + time.time() - t0, "rng": rng.getstate(),
                        "torch_rng": torch.get_rng_state(), "used": used}, tmp)
            os.replace(tmp, ck)
    torch.save({"model": model.state_dict(), "used": used, "cfg": cfg.__dict__},
               os.path.join(a.out, "final.pt"))


if __name__ == "__main__":
    main()
