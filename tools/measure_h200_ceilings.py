"""Measures the two ceilings every H200 number in docs/PERF.md is compared with (METHOD.md):
device-to-device copy bandwidth (bytes read + written) and dense matrix rates (bf16 and fp8 with
per-tensor scales), on random data, with CUDA events, median of repeated runs after warm-up.

Run on the GPU machine: python3 tools/measure_h200_ceilings.py
"""
import statistics

import torch


def time_ms(fn, warmup=3, reps=20):
    # bytes / ms / 1e9 = TB/s; flops / ms / 1e9 = TFLOP/s.
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def main():
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"device: {props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.1f} GiB, "
          f"torch {torch.__version__}")
    rows = []

    # Copy: 4 GiB source, rotating between two buffers so the 60 MB L2 plays no part.
    n = 1 << 30  # fp32 elements = 4 GiB
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    med, lo, hi = time_ms(lambda: dst.copy_(src))
    rows.append(("d2d copy 4 GiB (read+write)", f"{2 * n * 4 / med / 1e9:.2f} TB/s", med, lo, hi))
    del src, dst

    m = 8192
    a = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    med, lo, hi = time_ms(lambda: a @ b)
    rows.append(("bf16 GEMM 8192^3", f"{2 * m**3 / med / 1e9:.0f} TFLOP/s", med, lo, hi))

    a8 = (a / 4).to(torch.float8_e4m3fn)
    b8 = (b / 4).to(torch.float8_e4m3fn).t().contiguous().t()  # column-major B
    one = torch.tensor(1.0, device=dev)
    med, lo, hi = time_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    rows.append(("fp8 e4m3 GEMM 8192^3 (per-tensor scale)", f"{2 * m**3 / med / 1e9:.0f} TFLOP/s", med, lo, hi))

    # The decode shape of one MoE layer at batch 512: every expert's gate_up weights streamed once.
    e, inter, hidden = 256, 1024, 2048
    w = torch.randn(e, inter, hidden, device=dev, dtype=torch.bfloat16)
    x = torch.randn(e, 16, hidden, device=dev, dtype=torch.bfloat16)
    med, lo, hi = time_ms(lambda: torch.bmm(x, w.transpose(1, 2)))
    rows.append(("bmm 256 experts x 16 tokens, gate_up [1024x2048] bf16",
                 f"{w.numel() * 2 / med / 1e9:.2f} TB/s of weights", med, lo, hi))

    print("| what | rate | median ms | min ms | max ms |")
    print("|---|---|---|---|---|")
    for name, rate, med, lo, hi in rows:
        print(f"| {name} | {rate} | {med:.3f} | {lo:.3f} | {hi:.3f} |")


if __name__ == "__main__":
    main()
