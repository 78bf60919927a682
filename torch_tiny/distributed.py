"""torch.distributed on tiny tensors: the "tiny" process-group backend.

``dist.init_process_group("tiny")`` (or no backend: "tiny" is the default for the tiny
device, as "nccl" is for cuda) gives a process group whose collectives take tiny and CPU
tensors. It runs Gloo underneath: tiny tensors are staged through host memory (copied
out, reduced or gathered by Gloo over the network, copied back as one lazy write), so DDP,
``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter`` and ``barrier`` work on
tiny models. Every call completes before it returns (the returned work is done).

On a GPU, NCCL would let the collectives read device memory directly; tiny's buffers are
plain CUDA allocations, so that needs NCCL's communicator over the engine's stream, which
this backend does not do yet.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

BACKEND = "tiny"


def _done(result):
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.cpu() if t.device.type == "tiny" else t


def _back(dst: torch.Tensor, host: torch.Tensor) -> None:
    if host is not dst:
        dst.copy_(host)


class TinyProcessGroup(dist.ProcessGroup):
    """Collectives on tiny (and CPU) tensors over Gloo, staged through host memory."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

    def getBackendName(self):
        return BACKEND

    # destroy_process_group ends the group through these: the Gloo group's
    # threads must stop here, not while the interpreter tears down
    def shutdown(self):
        self._gloo.shutdown()

    def abort(self):
        self._gloo.abort()

    def _in_place(self, collective, tensors, opts, write_back=True):
        """Runs a Gloo collective that works in place on host copies of `tensors`."""
        hosts = [_host(t) for t in tensors]
        collective(hosts, opts).wait()
        if write_back:
            for t, h in zip(tensors, hosts):
                _back(t, h)
        return _done(tensors)

    def allreduce(self, tensors, opts=None):
        return self._in_place(self._gloo.allreduce, tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        for t in tensors:
            o = dist.AllreduceOptions()
            if opts is not None:
                o.reduceOp = opts.reduceOp
            self.allreduce([t], o)
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        return self._in_place(self._gloo.broadcast, tensors, opts or dist.BroadcastOptions())

    def allgather(self, output_lists, inputs, opts=None):
        out_hosts = [[_host(o) if o.device.type != "tiny" else torch.empty_like(o, device="cpu") for o in outs]
                     for outs in output_lists]
        self._gloo.allgather(out_hosts, [_host(t) for t in inputs], opts or dist.AllgatherOptions()).wait()
        for outs, hosts in zip(output_lists, out_hosts):
            for o, h in zip(outs, hosts):
                _back(o, h)
        return _done(output_lists)

    def all_gather_single(self, output, input, opts=None):
        self.allgather([list(output.chunk(self.size()))], [input], opts)
        return _done(output)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        # as an all-reduce of the stacked inputs (Gloo's own reduce_scatter is not on every build)
        o = dist.AllreduceOptions()
        if opts is not None:
            o.reduceOp = opts.reduceOp
        for out, ins in zip(outputs, input_lists):
            stacked = torch.stack([_host(i) for i in ins])
            self._gloo.allreduce([stacked], o).wait()
            out.copy_(stacked[self.rank()])
        return _done(outputs)

    def reduce_scatter_single(self, output, input, opts=None):
        self.reduce_scatter([output], [list(input.chunk(self.size()))], opts)
        return _done(output)

    # the names torch < 2.14 calls
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        # the result is defined on the destination only
        return self._in_place(self._gloo.reduce, tensors, opts, write_back=self.rank() == opts.rootRank)

    def barrier(self, opts=None):
        self._gloo.barrier(opts or dist.BarrierOptions()).wait()
        return _done(None)


def _create(store, rank, size, timeout):
    return TinyProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Registers the "tiny" backend (torch_tiny does this on import)."""
    if dist.is_available() and BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["tiny"])
