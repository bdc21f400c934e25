#!/usr/bin/env python3
"""Eager PyTorch Llama: the prefill reference bench/gpu/run.sh sets beside gpu_model_bench.

The same architecture and shapes as the synthetic model run.sh makes with tandem-make-model
(Llama: RMSNorm, Q/K/V/O projections, RoPE in its rotate-half form — the pairing does not change
the cost —, grouped-query attention, SwiGLU MLP, final norm, LM head), written the way Hugging Face's eager Llama computes it: bf16 weights and
activations, nn.Linear GEMMs, K/V heads repeated for GQA, attention as matmul + causal mask +
fp32 softmax + matmul (HF's "eager" attention, not SDPA), logits for the last position only (as
a server's prefill does). Weights are random (timing does not depend on their values; the
shapes are the model's). transformers is not needed.

    eager_llama.py --layers 16 --hidden 2048 --q-heads 32 --kv-heads 8 --head-dim 64 \
                   --intermediate 8192 --vocab 32000 --tokens 512 [--repeats 3]

Prints `prefill<N>_ms torch_eager <ms>` (best of --repeats after one warm-up, CUDA-synchronised)
and exits 0; exit status 1 with the reason when torch or a GPU is missing.
"""
import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    for name, default in [("layers", 16), ("hidden", 2048), ("q-heads", 32), ("kv-heads", 8),
                          ("head-dim", 64), ("intermediate", 8192), ("vocab", 32000),
                          ("tokens", 512), ("repeats", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"eager_llama: torch is not importable: {e}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("eager_llama: torch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    dt = torch.bfloat16
    torch.manual_seed(0)
    h, nq, nk, d, inter = a.hidden, a.q_heads, a.kv_heads, a.head_dim, a.intermediate

    def lin(n_out, n_in):
        layer = torch.nn.Linear(n_in, n_out, bias=False, device=dev, dtype=dt)
        torch.nn.init.normal_(layer.weight, std=0.02)
        return layer

    layers = []
    for _ in range(a.layers):
        layers.append(dict(q=lin(nq * d, h), k=lin(nk * d, h), v=lin(nk * d, h), o=lin(h, nq * d),
                           gate=lin(inter, h), up=lin(inter, h), down=lin(h, inter),
                           n1=torch.ones(h, device=dev, dtype=dt),
                           n2=torch.ones(h, device=dev, dtype=dt)))
    embed = torch.randn(a.vocab, h, device=dev, dtype=dt) * 0.02
    norm = torch.ones(h, device=dev, dtype=dt)
    head = lin(a.vocab, h)

    def rms(x, w, eps=1e-5):  # HF LlamaRMSNorm: fp32 inside
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(dt) * w

    def rope_tables(n):
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, d, 2, device=dev).float() / d))
        f = torch.outer(torch.arange(n, device=dev).float(), inv)
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(dt), emb.sin().to(dt)

    def rot_half(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([-x2, x1], dim=-1)

    @torch.no_grad()
    def prefill(ids):
        n = ids.shape[0]
        cos, sin = rope_tables(n)
        mask = torch.full((n, n), float("-inf"), device=dev).triu(1)
        x = embed[ids]
        for L in layers:
            r = x
            y = rms(x, L["n1"])
            q = L["q"](y).view(n, nq, d).transpose(0, 1)
            k = L["k"](y).view(n, nk, d).transpose(0, 1)
            v = L["v"](y).view(n, nk, d).transpose(0, 1)
            q = q * cos + rot_half(q) * sin
            k = k * cos + rot_half(k) * sin
            k = k.repeat_interleave(nq // nk, dim=0)
            v = v.repeat_interleave(nq // nk, dim=0)
            s = torch.matmul(q, k.transpose(1, 2)) / (d ** 0.5) + mask
            p = torch.softmax(s.float(), dim=-1).to(dt)
            o = torch.matmul(p, v).transpose(0, 1).reshape(n, nq * d)
            x = r + L["o"](o)
            y = rms(x, L["n2"])
            x = x + L["down"](torch.nn.functional.silu(L["gate"](y)) * L["up"](y))
        return head(rms(x[-1:], norm)).float()

    best = float("inf")
    for i in range(a.repeats + 1):
        ids = torch.randint(0, a.vocab, (a.tokens,), device=dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        prefill(ids)
        torch.cuda.synchronize()
        if i > 0:
            best = min(best, time.perf_counter() - t)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"prefill{a.tokens}_ms torch_eager {best * 1e3:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
