"""Model-level benchmarks: tiny against PyTorch's CPU backend in the same process.

- one training step of the beautiful-MNIST CNN (forward, cross entropy, backward, Adam) at batch 512
- resnet18 inference (eval, no_grad) at batch 1 and 16, 224x224
- the MNIST step eager and under torch.compile(backend="tiny"): the host time to issue a step
  (every operator dispatched, before the kernels run) and the whole step

Each is warmed up first (tiny compiles its kernels on first use; the compiled programs are cached
on disk, so later runs warm up faster), then timed as the median of several runs. Prints the times,
tiny's speed relative to the CPU (> 1: tiny is faster) and tiny's kernels per run. Printed figures
only; nothing here is pass/fail.

    python bench/bench_training.py [--reps 5] [--threads N]
"""
import argparse
import copy
import sys
from pathlib import Path
import statistics
import time

import torch
import torch.nn.functional as F

import torch_tiny
from torch_tiny import debug

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import beautiful_mnist  # noqa: E402  (the example's model, one definition)


def timed(fn, warmup, reps):
    """Median seconds of `fn()` after `warmup` calls. On tiny a call may return while its last
    kernels still run (a training step returns with its loss while the backward and optimizer
    kernels run; the next step's kernels wait for them): the block starts with nothing left
    running, and what is left when it ends counts in its last call, so none of it runs in
    another block's time."""
    for _ in range(warmup):
        fn()
    torch.tiny.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    torch.tiny.synchronize()
    times[-1] += time.perf_counter() - t0
    return statistics.median(times)


def kernels_of(fn):
    with debug.count_kernels() as c:
        fn()
    return c.kernels


def report(name, t_tiny, t_cpu, kernels):
    print(f"{name:34s} tiny {t_tiny * 1e3:9.1f} ms   cpu {t_cpu * 1e3:9.1f} ms   "
          f"tiny speed / cpu {t_cpu / t_tiny:5.2f}x   tiny kernels {kernels}", flush=True)


def mnist_steps(batch):
    """step(device): one Adam training step of a copy of the beautiful-MNIST CNN on random batches."""
    torch.manual_seed(0)
    model = beautiful_mnist()
    data = torch.randn(4096, 1, 28, 28)
    labels = torch.randint(0, 10, (4096,))
    g = torch.Generator().manual_seed(0)

    def runner(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        x, y = data.to(device), labels.to(device)

        def step():
            idx = torch.randint(0, x.shape[0], (batch,), generator=g).to(device)
            opt.zero_grad()
            loss = F.cross_entropy(m(x[idx]), y[idx])
            loss.backward()
            opt.step()
            return loss.item()  # tiny: runs the step's kernels
        return step
    return runner


def bench_mnist_step(batch, reps):
    runner = mnist_steps(batch)
    tiny_step, cpu_step = runner("tiny"), runner("cpu")
    t_tiny = timed(tiny_step, warmup=2, reps=reps)
    report(f"MNIST training step, batch {batch}", t_tiny, timed(cpu_step, warmup=2, reps=reps),
           kernels_of(tiny_step))


def bench_resnet18(batch, reps):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(batch, 3, 224, 224)
    dev_model = copy.deepcopy(model).to("tiny")
    xd = x.to("tiny")
    torch.tiny.synchronize()

    def tiny_fwd():
        with torch.no_grad():
            out = dev_model(xd)
            torch.tiny.synchronize()
        return out

    def cpu_fwd():
        with torch.no_grad():
            return model(x)

    t_tiny = timed(tiny_fwd, warmup=2, reps=reps)
    report(f"resnet18 inference, batch {batch}", t_tiny, timed(cpu_fwd, warmup=2, reps=reps), kernels_of(tiny_fwd))


def bench_compiled_dispatch(batch, reps):
    torch.manual_seed(0)
    model = beautiful_mnist()
    x, y = torch.randn(batch, 1, 28, 28).to("tiny"), torch.randint(0, 10, (batch,)).to("tiny")
    for compiled in (False, True):
        m = copy.deepcopy(model).to("tiny")
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        f = torch.compile(m, backend="tiny") if compiled else m

        def issue():
            opt.zero_grad()
            loss = F.cross_entropy(f(x), y)
            loss.backward()
            opt.step()
            return loss

        def step():
            issue().item()

        for _ in range(3):
            step()
        issue_s, step_s = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            loss = issue()
            t1 = time.perf_counter()
            loss.item()
            issue_s.append(t1 - t0)
            step_s.append(time.perf_counter() - t0)
        name = "compiled (backend=tiny)" if compiled else "eager"
        print(f"MNIST step, batch {batch}, {name:24s} issue {statistics.median(issue_s) * 1e3:6.2f} ms   "
              f"whole step {statistics.median(step_s) * 1e3:7.1f} ms   tiny kernels {kernels_of(step)}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads for the CPU backend")
    bench_mnist_step(512, args.reps)
    bench_resnet18(1, args.reps)
    bench_resnet18(16, args.reps)
    bench_compiled_dispatch(512, args.reps)


if __name__ == "__main__":
    main()
