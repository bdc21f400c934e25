#!/usr/bin/env python3
"""PyTorch SDPA decode attention: the reference gpu_attention_bench's kernels are compared with.

The same workloads as bench/gpu/gpu_attention_bench.cu (one query token per sequence attending
its whole context), but over contiguous K/V tensors [batch, kv_heads, context, head_dim] with
torch.nn.functional.scaled_dot_product_attention(enable_gqa=True). KV bytes per step count K and
V of every token of every KV head once, as the C++ benchmark does; the read bandwidth is measured
in this run (a streaming sum over 4 GiB), so the ratios are comparable with the C++ benchmark's
own ratios, each against its own run's read bandwidth.

Output: one line per workload, then
  RESULT gpu_sdpa_bw_ratio=<x>        headline (bf16, 64 x 4096, 8 KV heads x GQA 4, D=128)
  RESULT gpu_sdpa_split_bw_ratio=<x>  4 x 32768
  RESULT gpu_sdpa_d64_bw_ratio=<x>    SmolLM2 shape (256 x 1024, 3 KV heads x GQA 3, D=64)
Exit status 1 with the reason when torch or a GPU is missing.
"""
import sys


def main() -> int:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"sdpa_bench: torch is not importable: {e}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("sdpa_bench: torch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")

    def time_it(fn, warmup=3, iters=20):
        for _ in range(warmup):
            fn()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3 / iters

    buf = torch.zeros(1 << 30, dtype=torch.float32, device=dev)  # 4 GiB
    read_bw = buf.numel() * 4 / time_it(lambda: buf.sum(), 2, 10)
    del buf
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}: "
          f"read bandwidth (torch sum over 4 GiB) {read_bw / 1e9:.0f} GB/s")

    workloads = [
        ("bf16 64x4096 Hkv=8 G=4 D=128 (headline)", torch.bfloat16, 64, 4096, 8, 4, 128),
        ("bf16 4x32768 Hkv=8 G=4 D=128 (split keys)", torch.bfloat16, 4, 32768, 8, 4, 128),
        ("bf16 256x1024 Hkv=3 G=3 D=64 (SmolLM2 shape)", torch.bfloat16, 256, 1024, 3, 3, 64),
    ]
    ratios = []
    for name, dtype, batch, context, kv_heads, group, d in workloads:
        q = torch.randn(batch, kv_heads * group, 1, d, dtype=dtype, device=dev)
        k = torch.randn(batch, kv_heads, context, d, dtype=dtype, device=dev)
        v = torch.randn(batch, kv_heads, context, d, dtype=dtype, device=dev)
        s = time_it(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        kv_bytes = batch * context * kv_heads * 2 * d * k.element_size()
        bw = kv_bytes / s
        ratios.append(bw / read_bw)
        print(f"sdpa decode attention {name}: {s * 1e3:.3f} ms/step, {kv_bytes / 1e6:.1f} MB KV, "
              f"{bw / 1e9:.0f} GB/s = {bw / read_bw:.3f} of measured read bandwidth")
        del q, k, v
    print(f"RESULT gpu_sdpa_bw_ratio={ratios[0]:.3f}")
    print(f"RESULT gpu_sdpa_split_bw_ratio={ratios[1]:.3f}")
    print(f"RESULT gpu_sdpa_d64_bw_ratio={ratios[2]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
