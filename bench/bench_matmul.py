"""Matmul shapes: tiny against PyTorch's CPU backend in the same process (GFLOP/s, best of 5).

Arguments select cases by substring (`python bench/bench_matmul.py linear bmm`); with
TINY_THREADS=1 torch runs on one thread too. Printed figures only; nothing here is pass/fail.
"""
import os
import sys

import torch
import torch.nn.functional as F

import torch_tiny  # noqa: F401
from bench_kernels import best_of as best  # the same timing in every benchmark


CASES = [
    ("mm 1024^3", (1024, 1024), (1024, 1024), lambda a, b: a @ b, 2 * 1024**3),
    ("mm 512^3", (512, 512), (512, 512), lambda a, b: a @ b, 2 * 512**3),
    ("mm 256x1024x1024", (256, 1024), (1024, 1024), lambda a, b: a @ b, 2 * 256 * 1024 * 1024),
    ("linear 512x1024->1024", (512, 1024), (1024, 1024), F.linear, 2 * 512 * 1024 * 1024),
    ("linear 512x576->10", (512, 576), (10, 576), F.linear, 2 * 512 * 576 * 10),
    ("linear 64x32->64", (64, 32), (64, 32), F.linear, 2 * 64 * 32 * 64),
    ("bmm 16x128x64 @ 16x64x128", (16, 128, 64), (16, 64, 128), torch.bmm, 2 * 16 * 128 * 64 * 128),
    ("bmm q @ k^T 16x128x64", (16, 128, 64), (16, 128, 64), lambda a, b: a @ b.transpose(1, 2),
     2 * 16 * 128 * 64 * 128),
]


def main():
    if os.environ.get("TINY_THREADS") == "1":
        torch.set_num_threads(1)
    for name, sa, sb, f, flops in CASES:
        if sys.argv[1:] and not any(s in name for s in sys.argv[1:]):
            continue
        ac, bc = torch.randn(sa), torch.randn(sb)
        at, bt = ac.to("tiny"), bc.to("tiny")
        torch.tiny.synchronize()

        def run_tiny():
            y = f(at, bt)
            torch.tiny.synchronize()
            return y

        err = (run_tiny().cpu() - f(ac, bc)).abs().max().item()
        t_tiny = best(run_tiny)
        t_cpu = best(lambda: f(ac, bc))
        print(f"{name:28s} tiny {flops / t_tiny / 1e9:6.1f} GFLOP/s ({t_tiny * 1e3:7.3f} ms)  "
              f"cpu {flops / t_cpu / 1e9:6.1f}  tiny/cpu {t_cpu / t_tiny:5.2f}  max err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
