"""tiny against PyTorch's CPU backend, the cases of the CPU-speed issue, in one process.

Rows: the median time of each after warm-up, the two run in turns (three rounds of a block of
--reps calls each), and tiny/cpu as the median of the rounds' ratios (below 1 = tiny faster):
- an 8-op elementwise chain over 2^24 float32, a full sum of 2^24 float32, a 1024^3 matmul
- 1000 dependent adds on 16 elements (the cost of dispatching an op through ATen into the engine)
- the beautiful-MNIST CNN Adam step at batch 512, resnet18 inference at batch 1 and 16,
  a resnet18 SGD-momentum step at batch 16 on 64x64 images
and their geometric mean; then, outside the mean, a pre-norm transformer block at (8, 128, 512)
(LayerNorm, attention, GELU MLP: a LayerNorm feeding linear layers), a resnet18 SGD step at batch
64 on 32x32 images, a linear layer of 16 rows, 4096 -> 4096, ConvNeXt's depthwise 7x7 convolution,
MobileNetV2's AdamW step at batch 2 on 64x64 images and an LSTM's AdamW step over 128 time
steps. Then the cold start, each in a fresh interpreter: `examples/demo.py`'s tiny half with an
empty kernel cache and again with it warm, and the first two resnet18 training steps with an
empty cache (`--no-cold` skips these). The sum (bound by the memory it reads) and the matmul (by
the FMA units) also print each side's GB/s or GFLOP/s: a ratio near 1 at equal rates near the
machine's own is its limit, not a slow kernel. Printed figures only; nothing here is pass/fail.

    python bench/bench_cpu.py [--reps 5] [--no-cold]
"""
import argparse
import copy
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import torch_tiny  # noqa: F401  (registers the device)
from torch_tiny import debug

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_training import mnist_steps, timed  # noqa: E402

ratios = []


def settle(fn, seconds=0.01):
    """Untimed calls of `fn` for `seconds`, one at least."""
    end = time.perf_counter() + seconds
    fn()
    while time.perf_counter() < end:
        fn()


def paired(tiny_fn, cpu_fn, warmup, reps, rounds=3):
    """The median over the rounds of each one's block median, and of the rounds' ratios.
    The two run in turns, a block of `reps` calls each, the first of each round alternating:
    on a shared VM a slow phase lasts seconds, and timing all of one's calls before the
    other's gave either side the slow phase (the same row moved by 30 %). Each block starts
    with untimed calls for 10 ms at least, while the other's threads may still be spinning:
    PyTorch's OpenMP threads spin for milliseconds after a parallel region (libgomp's
    GOMP_SPINCOUNT), and tiny's x.sum() took 2.3 ms in a block after PyTorch's with one
    untimed call, 1.7 ms alone. (A sleep instead would time a cold VM: a 20 ms pause doubled
    the time of a 3 ms call on either side.)"""
    for _ in range(warmup):
        tiny_fn()
        cpu_fn()
    t_tiny, t_cpu = [], []
    for r in range(rounds):
        for fn, times in ((tiny_fn, t_tiny), (cpu_fn, t_cpu))[:: 1 if r % 2 == 0 else -1]:
            settle(fn)
            times.append(timed(fn, 0, reps))
    ratio = statistics.median(a / b for a, b in zip(t_tiny, t_cpu))
    return statistics.median(t_tiny), statistics.median(t_cpu), ratio


def row(name, tiny_fn, cpu_fn, reps, warmup=2, in_mean=True, bytes_read=0, flops=0):
    """One row. `bytes_read` or `flops` (a memory- or compute-bound case) add each side's rate,
    GB/s or GFLOP/s: where both reach the same one, the machine's limit is the obstacle."""
    t_tiny, t_cpu, ratio = paired(tiny_fn, cpu_fn, warmup, reps)
    with debug.count_kernels() as c:
        tiny_fn()
    if in_mean:
        ratios.append(ratio)
    rate = ""
    if bytes_read or flops:
        amount, unit = (bytes_read, "GB/s") if bytes_read else (flops, "GFLOP/s")
        rate = f"   {unit} tiny {amount / t_tiny / 1e9:.0f}, cpu {amount / t_cpu / 1e9:.0f}"
    print(f"{name:44s} tiny {t_tiny * 1e3:9.2f} ms   cpu {t_cpu * 1e3:9.2f} ms   tiny/cpu {ratio:5.2f}"
          f"   tiny kernels {c.kernels}{rate}", flush=True)


def sync(t):
    torch.tiny.synchronize()
    return t


def training_step(model, make_optimizer, device, batch, size):
    """step(): a training step of a copy of `model` (10 classes) on `device`, on one random
    batch of `size`^2 images; returns the loss."""
    m = copy.deepcopy(model).to(device)
    opt = make_optimizer(m.parameters())
    torch.manual_seed(1)
    xd, yd = torch.randn(batch, 3, size, size).to(device), torch.randint(0, 10, (batch,)).to(device)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(m(xd), yd)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def kernels_cases(reps):
    x = torch.randn(1 << 24)
    xt = x.to("tiny")

    def chain(v):
        return ((((v * 1.5 + 0.5).relu() - 0.25) * v).exp2().sqrt() + 1.0).tanh()
    row("8-op elementwise chain, 2^24 float32", lambda: sync(chain(xt)), lambda: chain(x), reps)
    row("x.sum(), 2^24 float32", lambda: xt.sum().item(), lambda: x.sum().item(), reps, bytes_read=4 << 24)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    at, bt = a.to("tiny"), b.to("tiny")
    row("matmul 1024^3 float32", lambda: sync(at @ bt), lambda: a @ b, reps, flops=2 * 1024 ** 3)
    s = torch.randn(16)
    st = s.to("tiny")

    def adds(v):
        for _ in range(1000):
            v = v + 1.0
        return v
    row("1000 dependent adds on 16 elements", lambda: adds(st).cpu(), lambda: adds(s), reps)


def mnist_case(reps, batch=512):
    runner = mnist_steps(batch)
    row(f"beautiful-MNIST Adam step, batch {batch}", runner("tiny"), runner("cpu"), reps)


def resnet_cases(reps):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    for batch in (1, 16):
        x = torch.randn(batch, 3, 224, 224)
        mt, xt = copy.deepcopy(model).to("tiny"), x.to("tiny")

        def tiny_fwd():
            with torch.no_grad():
                return sync(mt(xt))

        def cpu_fwd():
            with torch.no_grad():
                return model(x)
        row(f"resnet18 inference, batch {batch}", tiny_fwd, cpu_fwd, reps)
    train = torchvision.models.resnet18(num_classes=10).train()

    def runner(device, batch=16, size=64):
        return training_step(train, lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9), device, batch, size)
    row("resnet18 SGD-momentum step, batch 16 at 64^2", runner("tiny"), runner("cpu"), reps)
    return runner


def small_input_cases(reps, runner):
    """Not the issue's rows: printed beside them, outside the geometric mean. A resnet18 SGD step
    at CIFAR's 32x32 (layer4's maps are 1x1, smaller than its 3x3 kernels), a linear layer of
    few rows (a small batch through a classifier, a decoder's tokens: the weight streams) and
    ConvNeXt's depthwise 7x7 convolution at 14x14, forward and backward (rows 14 wide), and
    MobileNetV2's AdamW step at batch 2 (a small model's step, host time as much as kernels)."""
    row("resnet18 SGD-momentum step, batch 64 at 32^2", runner("tiny", 64, 32), runner("cpu", 64, 32), reps,
        in_mean=False)
    torch.manual_seed(0)
    x, w, b = torch.randn(16, 4096), torch.randn(4096, 4096), torch.randn(4096)
    xt, wt, bt = x.to("tiny"), w.to("tiny"), b.to("tiny")
    row("linear 16 x 4096 -> 4096", lambda: sync(F.linear(xt, wt, bt)), lambda: F.linear(x, w, b), reps,
        in_mean=False)

    def depthwise(device):
        x = torch.randn(8, 384, 14, 14, device=device, requires_grad=True)
        w = torch.randn(384, 1, 7, 7, device=device, requires_grad=True)
        g = torch.randn(8, 384, 14, 14, device=device)

        def step():
            x.grad = w.grad = None
            F.conv2d(x, w, padding=3, groups=384).backward(g)
            return w.grad.sum().item()
        return step
    row("depthwise 7x7 conv fwd+bwd, 8x384x14x14", depthwise("tiny"), depthwise("cpu"), reps, in_mean=False)

    # A small model's training step: 350 small kernels whose time is as much the host's
    # (building the graphs) as the kernels'; the CPU's launch queue overlaps the two.
    import torchvision
    torch.manual_seed(0)
    mobilenet = torchvision.models.mobilenet_v2(num_classes=10).train()

    def adamw(params):
        return torch.optim.AdamW(params, lr=1e-3)
    row("MobileNetV2 AdamW step, batch 2 at 64^2", training_step(mobilenet, adamw, "tiny", 2, 64),
        training_step(mobilenet, adamw, "cpu", 2, 64), reps, in_mean=False)


def recurrent_case(reps):
    """Not one of the issue's rows: printed beside them, outside the geometric mean. An LSTM's
    AdamW step over 128 time steps of a small batch: each time step is a few small kernels in a
    chain (406 in all), each a few microseconds; the step's graph holds one subgraph call for the
    forward and one for the backward (112 nodes, where the steps' own were 7.7k). Both backends
    compute all steps' input products at once."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(64, 128, batch_first=True)

    def step_of(device):
        m = copy.deepcopy(lstm).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        torch.manual_seed(1)
        x, y = torch.randn(4, 128, 64).to(device), torch.randn(4, 128, 128).to(device)

        def step():
            opt.zero_grad()
            loss = F.mse_loss(m(x)[0], y)
            loss.backward()
            opt.step()
            return loss.item()
        return step
    row("LSTM 64->128 AdamW step, batch 4, 128 steps", step_of("tiny"), step_of("cpu"), reps, in_mean=False)


class Block(torch.nn.Module):
    """A pre-norm transformer block: LayerNorm, q/k/v, softmax attention, out projection,
    LayerNorm, GELU MLP, residuals (the shapes of GPT-2 small's, 512 wide)."""

    def __init__(self, d=512, heads=8):
        super().__init__()
        nn = torch.nn
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, -1) @ v
        x = x + self.o(a.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.mlp(self.ln2(x))


def transformer_case(reps):
    """Not one of the issue's rows: printed beside them, outside the geometric mean."""
    torch.manual_seed(0)
    model = Block().eval()
    mt, x = copy.deepcopy(model).to("tiny"), torch.randn(8, 128, 512)
    xt = x.to("tiny")

    def run(m, v):
        with torch.no_grad():
            return m(v)
    row("transformer block (8, 128, 512), inference", lambda: sync(run(mt, xt)), lambda: run(model, x), reps,
        in_mean=False)


COLD_RESNET = """
import time, torch, torchvision, torch.nn.functional as F
import torch_tiny
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10).to("tiny")
opt = torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9)
x, y = torch.randn(16, 3, 64, 64).to("tiny"), torch.randint(0, 10, (16,)).to("tiny")
for i in range(2):
    t0 = time.perf_counter()
    opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step(); torch.tiny.synchronize()
    print(f"step {i} {time.perf_counter() - t0:.2f}")
"""


def cold_start():
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TINY_CACHE_DIR=cache)
        for label in ("empty kernel cache", "warm kernel cache"):
            out = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], env=env, capture_output=True,
                                 text=True, check=True).stdout
            tiny = re.search(r"time: tiny ([\d.]+)s", out).group(1)
            print(f"cold start: examples/demo.py's tiny half, {label:18s} {tiny} s", flush=True)
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", COLD_RESNET], env=dict(os.environ, TINY_CACHE_DIR=cache),
                             capture_output=True, text=True, check=True).stdout
        steps = re.findall(r"step \d ([\d.]+)", out)
        print(f"cold start: resnet18 SGD step (batch 16 at 64^2), empty cache: first {steps[0]} s, second {steps[1]} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start runs")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads for the CPU backend")
    kernels_cases(args.reps)
    mnist_case(args.reps)
    train_runner = resnet_cases(args.reps)
    print(f"geometric mean of tiny/cpu over {len(ratios)} rows: "
          f"{math.exp(sum(math.log(r) for r in ratios) / len(ratios)):.2f}")
    transformer_case(args.reps)
    small_input_cases(args.reps, train_runner)
    recurrent_case(args.reps)
    if not args.no_cold:
        cold_start()


if __name__ == "__main__":
    main()
