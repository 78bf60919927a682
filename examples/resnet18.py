"""resnet18 (torchvision, random weights) on torch_tiny: inference checked against the CPU,
then SGD training steps, with the kernels each takes.

    python examples/resnet18.py                          # batch 8 at 64x64, 3 training steps
    python examples/resnet18.py --batch 1 --size 224
    python examples/resnet18.py --report resnet18.html   # trace one inference and one training step

With --report, the trace's summary is printed (kernels by module, why each kernel stores its
outputs) and an HTML report with the schedules drawn is written.
"""
import argparse
import time

import torch
import torch.nn.functional as F
import torchvision

import torch_tiny  # noqa: F401  (registers the device)
from torch_tiny import debug


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="training steps")
    ap.add_argument("--report", metavar="HTML", help="trace an inference and a training step; write the report here")
    args = ap.parse_args()

    torch.manual_seed(0)
    cpu_model = torchvision.models.resnet18(num_classes=10).eval()
    model = torchvision.models.resnet18(num_classes=10).eval()
    model.load_state_dict(cpu_model.state_dict())
    model.to("tiny")
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    xt, yt = x.to("tiny"), y.to("tiny")

    with torch.no_grad():
        ref = cpu_model(x)
        for i in range(2):  # the first call schedules and compiles
            t0 = time.perf_counter()
            with debug.count_kernels() as c:
                out = model(xt).cpu()
            dt = time.perf_counter() - t0
        print(f"inference, batch {args.batch} at {args.size}x{args.size}: {c.kernels} kernels, {dt * 1e3:.1f} ms, "
              f"max |tiny - cpu| = {(out - ref).abs().max().item():.2e}")
        if args.report:
            with debug.trace() as inference:
                model(xt).cpu()
            inference.summary()

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(args.steps):
        t0 = time.perf_counter()
        with debug.count_kernels() as c:
            loss = step()
        print(f"training step {i}: loss {loss:.4f}, {c.kernels} kernels, {(time.perf_counter() - t0) * 1e3:.1f} ms")
    if args.report:
        with debug.trace() as training:
            step()
        training.summary()
        training.save_html(args.report)
        print(f"wrote {args.report} (the training step)")


if __name__ == "__main__":
    main()
