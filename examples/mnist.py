"""Trains tinygrad's "beautiful MNIST" CNN on torch_tiny (or the CPU with --device cpu).

Nothing is downloaded: the script renders its own 28x28 digit set. Each image is one
of ten 5x7 bitmap digits drawn at a random scale, aspect, rotation, shear and
position (bilinear, so strokes are anti-aliased), with a random stroke width, a random
patch erased, clutter strokes and Gaussian noise. A linear classifier gets about 40%
of it; the CNN gets about 95% on held-out images after the default 300 steps of 512.

    python examples/mnist.py                  # 300 steps on tiny
    python examples/mnist.py --device cpu     # the same on PyTorch's CPU backend
    python examples/mnist.py --steps 100 --batch 128
    python examples/mnist.py --steps 3 --report mnist.html   # what each step runs, and why

Prints the loss on a tqdm progress bar, the kernels one training step
runs on tiny (forward, loss, backward and Adam: one lazy graph, run when the loss is
read), the time per step and the final test accuracy.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

# 5x7 bitmap digits, one string of 7 rows per digit.
GLYPHS = [
    "01110 10001 10011 10101 11001 10001 01110",  # 0
    "00100 01100 00100 00100 00100 00100 01110",  # 1
    "01110 10001 00001 00010 00100 01000 11111",  # 2
    "11111 00010 00100 00010 00001 10001 01110",  # 3
    "00010 00110 01010 10010 11111 00010 00010",  # 4
    "11111 10000 11110 00001 00001 10001 01110",  # 5
    "00110 01000 10000 11110 10001 10001 01110",  # 6
    "11111 00001 00010 00100 01000 01000 01000",  # 7
    "01110 10001 10001 01110 10001 10001 01110",  # 8
    "01110 10001 10001 01111 00001 00010 01100",  # 9
]


def glyph_templates():
    """(10, 1, 9, 7): the bitmaps with a one-pixel empty border (so sampling fades out)."""
    t = torch.zeros(10, 1, 9, 7)
    for d, rows in enumerate(GLYPHS):
        for r, row in enumerate(rows.split()):
            for c, bit in enumerate(row):
                t[d, 0, r + 1, c + 1] = float(bit)
    return t


def render(labels, g):
    """28x28 float images of the digits in `labels`, drawn with random geometry and noise."""
    n = labels.numel()
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=g)  # noqa: E731
    # Output pixel -> glyph coordinates (affine_grid's normalized [-1, 1] coordinates).
    height = u(15, 23)                       # glyph height in pixels (9 template rows)
    width = height * u(0.55, 0.95)           # glyph width (7 template columns)
    angle = u(-0.35, 0.35)                   # radians, about +-20 degrees
    shear = u(-0.35, 0.35)
    tx, ty = u(-0.2, 0.2), u(-0.15, 0.15)    # shift, in units of half the canvas
    cos, sin = torch.cos(angle), torch.sin(angle)
    # inverse of (rotate . shear . scale): canvas -> glyph
    sx, sy = 28.0 / width, 28.0 / height
    a = torch.stack([torch.stack([cos, sin], 1), torch.stack([-sin, cos], 1)], 1)   # R^-1
    sh = torch.stack([torch.stack([torch.ones(n), -shear], 1), torch.stack([torch.zeros(n), torch.ones(n)], 1)], 1)
    sc = torch.diag_embed(torch.stack([sx, sy], 1))
    m = sc @ sh @ a
    t = -(m @ torch.stack([tx, ty], 1).unsqueeze(2))
    theta = torch.cat([m, t], 2)
    grid = F.affine_grid(theta, (n, 1, 28, 28), align_corners=False)
    img = F.grid_sample(glyph_templates()[labels], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    # stroke width: thicken some, thin others
    thick = F.max_pool2d(img, 3, 1, 1)
    blur = F.avg_pool2d(img, 3, 1, 1, count_include_pad=False)
    w = u(0, 1).view(n, 1, 1, 1)
    img = torch.where(w < 0.3, thick, torch.where(w > 0.7, blur * 1.6, img)).clamp(0, 1)
    # erase a random 6x6 patch (sometimes part of the stroke)
    yy = torch.arange(28).view(1, 28, 1)
    xx = torch.arange(28).view(1, 1, 28)
    py, px = torch.randint(4, 18, (n, 1, 1), generator=g), torch.randint(4, 18, (n, 1, 1), generator=g)
    patch = ((yy >= py) & (yy < py + 6) & (xx >= px) & (xx < px + 6)).unsqueeze(1)
    img = img * ~(patch & (torch.rand(n, 1, 1, 1, generator=g) < 0.5))
    # clutter: a random short line per image
    x0, y0 = u(0, 28), u(0, 28)
    ang = u(0, math.pi)
    dist = ((xx.unsqueeze(1) - x0.view(n, 1, 1, 1)) * torch.sin(ang).view(n, 1, 1, 1)
            - (yy.unsqueeze(1) - y0.view(n, 1, 1, 1)) * torch.cos(ang).view(n, 1, 1, 1)).abs()
    along = ((xx.unsqueeze(1) - x0.view(n, 1, 1, 1)) ** 2 + (yy.unsqueeze(1) - y0.view(n, 1, 1, 1)) ** 2).sqrt()
    line = ((dist < 0.8) & (along < 6)).float() * 0.7
    img = torch.maximum(img, line)
    img = img * u(0.7, 1.0).view(n, 1, 1, 1) + 0.22 * torch.randn(n, 1, 28, 28, generator=g)
    return img


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    x = torch.cat([render(labels[i:i + 4096], g) for i in range(0, n, 4096)])
    return (x - 0.2) / 0.4, labels  # roughly zero mean, unit variance


def beautiful_mnist():
    return nn.Sequential(
        nn.Conv2d(1, 32, 5), nn.ReLU(),
        nn.Conv2d(32, 32, 5), nn.ReLU(),
        nn.BatchNorm2d(32), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.Conv2d(64, 64, 3), nn.ReLU(),
        nn.BatchNorm2d(64), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(576, 10),
    )


def accuracy(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="tiny", help="tiny (default) or cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-size", type=int, default=30000)
    ap.add_argument("--test-size", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", metavar="HTML", help="trace the first 3 training steps (tiny only): print the "
                    "trace's summary and write its HTML report here")
    args = ap.parse_args()
    if args.device.startswith("tiny"):
        import torch_tiny  # noqa: F401  (registers the device)
        from torch_tiny import debug
    else:
        debug = None
    dev = torch.device(args.device)

    t0 = time.perf_counter()
    x_train, y_train = make_dataset(args.train_size, args.seed)
    x_test, y_test = make_dataset(args.test_size, args.seed + 1)
    print(f"synthetic digits: {len(x_train)} train, {len(x_test)} test images "
          f"({time.perf_counter() - t0:.1f}s to render)")
    x_train, y_train, x_test, y_test = (t.to(dev) for t in (x_train, y_train, x_test, y_test))

    torch.manual_seed(args.seed)
    model = beautiful_mnist().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)

    def step(idx):
        opt.zero_grad()
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()
        return loss.item()  # runs the step's kernels

    bar = tqdm(total=args.steps)
    kernels, times = [], []
    trace = debug.trace(steps=3).start() if args.report and debug is not None else None
    for i in range(args.steps):
        idx = torch.randint(0, x_train.shape[0], (args.batch,), generator=g).to(dev)
        t = time.perf_counter()
        if debug is not None:
            with debug.count_kernels() as c:
                loss = step(idx)
            kernels.append(c.kernels)
        else:
            loss = step(idx)
        times.append(time.perf_counter() - t)
        bar.set_description(f"loss {loss:6.3f}" + (f" kernels/step {kernels[-1]}" if kernels else ""))
        bar.update(1)
    bar.close()
    if trace is not None:
        trace.stop()
        trace.summary()
        trace.save_html(args.report)
        print(f"wrote {args.report}")

    acc = accuracy(model, x_test, y_test)
    steady = sorted(times[1:] or times)[len(times[1:] or times) // 2]
    print(f"device {dev}: {args.steps} steps of batch {args.batch}, final loss {loss:.4f}")
    if kernels:
        print(f"kernels per training step: {kernels[-1]} (first step {kernels[0]})")
    print(f"time per step: {steady * 1e3:.1f} ms (median after the first; first {times[0]:.2f}s)")
    print(f"test accuracy: {acc * 100:.2f}%")


if __name__ == "__main__":
    main()
