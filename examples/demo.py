"""The torch_tiny demo: train a small classifier on "tiny" and on the CPU, side by side.

Prints the loss of every few steps on both devices, how many kernels one training step
takes on tiny (forward, loss, backward, optimizer: one lazy graph), and the final accuracy.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tiny


def make_data(n=2048, dim=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def make_model(dim=32, classes=4, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, classes))


def train(device, x, y, steps, batch, report):
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = x.to(device), y.to(device)
    losses, kernels = [], []
    for step in range(steps):
        lo = (step * batch) % x.shape[0]
        xb, yb = x[lo:lo + batch], y[lo:lo + batch]
        with torch_tiny.debug.count_kernels() as c:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            value = loss.item()
        losses.append(value)
        kernels.append(c.kernels)
        if step % report == 0 or step == steps - 1:
            print(f"  [{device}] step {step:3d}  loss {value:.4f}" + (f"  kernels {c.kernels}" if device == "tiny" else ""))
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    return losses, kernels, acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    x, y = make_data()
    print(f"torch {torch.__version__}, torch_tiny on device {torch.device('tiny')}")
    # PyTorch's first optimizer construction imports torch._dynamo (about 1.2 s, on any device):
    # paid here, so neither half's time includes it
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    t0 = time.perf_counter()
    tl, tk, tacc = train("tiny", x, y, args.steps, args.batch, report=10)
    t1 = time.perf_counter()
    cl, _, cacc = train("cpu", x, y, args.steps, args.batch, report=10)
    t2 = time.perf_counter()
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(tl, cl))
    print(f"tiny accuracy {tacc:.3f}, cpu accuracy {cacc:.3f}")
    print(f"largest relative loss difference tiny vs cpu over {args.steps} steps: {worst:.2e}")
    print(f"kernels per training step on tiny: {tk[-1]} (first step {tk[0]})")
    print(f"time: tiny {t1 - t0:.2f}s (includes compiling kernels on first use), cpu {t2 - t1:.2f}s")
    print(f"engine counters: {torch_tiny.debug.counters()}")


if __name__ == "__main__":
    main()
