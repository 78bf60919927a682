"""tiny against eager CUDA on the products that take the shared-tile and tensor-core paths at a
GPU's sizes: float16, bfloat16, TF32 and float32, each operand staged along k or along its rows
(a@b, a.T@b, a@b.T, a.T@b.T), partial blocks, and float16 / float32 convolutions. Prints one
line per case and exits 1 if any is off. Needs a CUDA GPU (scripts/gpu_check.sh runs it)."""
import sys

import torch
import torch.nn.functional as F
import torch_tiny  # noqa: F401


def check(name, fn, *xs, rtol):
    """fn on tiny against fn on eager CUDA; error relative to |value| + 1. Returns whether within rtol."""
    ref = fn(*[x.cuda() for x in xs]).float()
    got = fn(*[x.to("tiny") for x in xs]).cpu().float().cuda()
    err = ((got - ref).abs() / (ref.abs() + 1)).max().item()
    print(f"{'ok ' if err < rtol else 'BAD'} {name}: max rel err {err:.2e}", flush=True)
    return err < rtol


def main():
    torch.manual_seed(0)
    results = []
    for m, k, n in [(72, 48, 80), (200, 320, 264), (1024, 1024, 1024)]:
        for dt, tf32 in [(torch.float16, False), (torch.bfloat16, False), (torch.float32, True), (torch.float32, False)]:
            torch.backends.cuda.matmul.allow_tf32 = tf32  # read by both contenders
            a, b = torch.rand(m, k).to(dt), torch.rand(k, n).to(dt)
            tol = 1e-5 if dt == torch.float32 and not tf32 else 1e-2
            tag = f"{m}x{k}x{n} {str(dt)[6:]}{' tf32' if tf32 else ''}"
            at, bt = a.t().contiguous(), b.t().contiguous()
            results += [check(tag + " a@b", lambda a, b: a @ b, a, b, rtol=tol),
                        check(tag + " a.T@b", lambda a, b: a.t() @ b, at, b, rtol=tol),
                        check(tag + " a@b.T", lambda a, b: a @ b.t(), a, bt, rtol=tol),
                        check(tag + " a.T@b.T", lambda a, b: a.t() @ b.t(), at, bt, rtol=tol)]
    torch.backends.cuda.matmul.allow_tf32 = False
    x, w = torch.rand(4, 64, 28, 28), torch.rand(128, 64, 3, 3) / 24
    results += [check("conv float16", lambda x, w: F.conv2d(x, w, padding=1), x.half(), w.half(), rtol=1e-2),
                check("conv float32", lambda x, w: F.conv2d(x, w, padding=1), x, w, rtol=1e-4)]
    bad = results.count(False)
    print("gpu_mmcheck:", f"{bad} of {len(results)} off" if bad else f"all {len(results)} ok", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
