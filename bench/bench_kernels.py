"""Kernel-level benchmarks: tiny against PyTorch's CPU backend in the same process.

- an elementwise chain of 8 ops over 2^24 float32 (GB/s, and against a plain copy of the same bytes)
- a full sum of 2^24 float32 (GB/s)
- a 1024x1024x1024 float32 matmul (GFLOP/s)
Printed figures only; nothing here is pass/fail.
"""
import time

import torch

import torch_tiny


def best_of(fn, reps=5):
    fn()  # warm up (compiles on first use)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def chain(x):
    return ((((x * 1.5 + 0.5).relu() - 0.25) * 2.0).abs() + 1.0) / 3.0 - 0.125


def main():
    n = 1 << 24
    xc = torch.randn(n)
    xt = xc.to("tiny")
    torch.tiny.synchronize()
    nbytes = 2 * n * 4  # read + write

    # elementwise: materialize the result (one kernel) each time
    def run_tiny_chain():
        y = chain(xt)
        torch.tiny.synchronize()
        return y

    t_tiny = best_of(run_tiny_chain)
    t_cpu = best_of(lambda: chain(xc))
    dst = torch.empty_like(xc)
    t_copy = best_of(lambda: dst.copy_(xc))
    print(f"elementwise chain (8 ops, 2^24 f32): tiny {nbytes / t_tiny / 1e9:6.1f} GB/s  "
          f"cpu {nbytes / t_cpu / 1e9:6.1f} GB/s  copy {nbytes / t_copy / 1e9:6.1f} GB/s  "
          f"tiny/copy {t_copy / t_tiny:5.2f}  tiny speedup vs cpu {t_cpu / t_tiny:5.2f}x")

    def run_tiny_sum():
        return xt.sum().item()

    t_tiny = best_of(run_tiny_sum)
    t_cpu = best_of(lambda: xc.sum().item())
    print(f"full sum (2^24 f32):                 tiny {n * 4 / t_tiny / 1e9:6.1f} GB/s  "
          f"cpu {n * 4 / t_cpu / 1e9:6.1f} GB/s  tiny/copy {t_copy / 2 / t_tiny:5.2f}  "
          f"tiny speedup vs cpu {t_cpu / t_tiny:5.2f}x")

    m = 1024
    ac, bc = torch.randn(m, m), torch.randn(m, m)
    at, bt = ac.to("tiny"), bc.to("tiny")
    torch.tiny.synchronize()

    def run_tiny_mm():
        y = at @ bt
        torch.tiny.synchronize()
        return y

    t_tiny = best_of(run_tiny_mm, reps=3)
    t_cpu = best_of(lambda: ac @ bc, reps=3)
    flops = 2 * m ** 3
    print(f"matmul 1024^3 f32:                   tiny {flops / t_tiny / 1e9:6.1f} GFLOP/s  "
          f"cpu {flops / t_cpu / 1e9:6.1f} GFLOP/s  tiny/cpu {t_cpu / t_tiny:5.2f}")


if __name__ == "__main__":
    torch.set_num_threads(torch.get_num_threads())
    main()
