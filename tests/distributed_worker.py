"""One rank of tests/test_distributed.py: collectives and a DDP training run on one
device ("tiny" or "cpu"), results written as JSON. Usage: rank world store_file device out.json"""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_tiny  # noqa: F401

rank, world, store_file, dev, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
# tiny: no backend named, as a user of cuda names none (the default for the device is "tiny")
# rendezvous through a file: no port to race other processes for
dist.init_process_group(None if dev == "tiny" else "gloo", init_method="file://" + store_file, rank=rank,
                        world_size=world, timeout=timedelta(seconds=60))
res = {"backend": dist.group.WORLD.name()}

t = torch.arange(6.0).reshape(2, 3).to(dev) * (rank + 1)
dist.all_reduce(t)
res["all_reduce"] = t.cpu().tolist()
m = torch.full((3,), float(rank + 2)).to(dev)
dist.all_reduce(m, op=dist.ReduceOp.MAX)
res["all_reduce_max"] = m.cpu().tolist()
v = torch.arange(4.0).to(dev)[1:3] * 0 + rank  # a view of a larger storage
base = torch.zeros(5).to(dev)
dist.all_reduce(base[1:4])  # a non-contiguous-offset slice
res["all_reduce_view"] = base.cpu().tolist()
b = (torch.arange(5.0) + 10 * rank).to(dev)
dist.broadcast(b, src=world - 1)
res["broadcast"] = b.cpu().tolist()
outs = [torch.zeros(2, device=dev) for _ in range(world)]
dist.all_gather(outs, v)
res["all_gather"] = [o.cpu().tolist() for o in outs]
flat = torch.zeros(2 * world, device=dev)
dist.all_gather_into_tensor(flat, v.contiguous())
res["all_gather_into_tensor"] = flat.cpu().tolist()
rs = torch.zeros(2, device=dev)
dist.reduce_scatter(rs, [torch.full((2,), float(rank * 10 + i), device=dev) for i in range(world)])
res["reduce_scatter"] = rs.cpu().tolist()
red = torch.full((3,), float(rank + 1)).to(dev)
dist.reduce(red, dst=0)
res["reduce"] = red.cpu().tolist()
dist.barrier()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(dev)
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
losses = []
for _ in range(4):
    x = torch.randn(5, 8, generator=g).to(dev)
    y = torch.randint(0, 3, (5,), generator=g).to(dev)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
res["losses"] = losses
res["params"] = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
dist.destroy_process_group()
with open(out, "w") as f:
    json.dump(res, f)
# Known issue (open): after a DDP run on tiny the interpreter's teardown can
# abort (std::terminate during static destruction, no Python frame), about one
# exit in five. The results are written; leave without the teardown.
os._exit(0)
