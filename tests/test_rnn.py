"""nn.LSTM / nn.GRU / nn.RNN and their cells against the CPU, forward and backward. Each time step
runs through the fused cells (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backward),
which the CPU has no kernels for; each layer's input products are one product over all steps."""

import copy
import gc

import pytest
import torch
import torch.nn as nn

from conftest import DEV, assert_same, requires_tiny, to_dev


def _compare(module, inputs, rtol=1e-4, atol=1e-5, read_first=False):
    """The module's outputs and every parameter's and input's gradient, on the device and the CPU;
    `read_first`: the outputs are read before the backward (which then runs on its own)."""
    dev_module = copy.deepcopy(module).to(DEV)
    cpu_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    dev_in = [to_dev(x).detach().requires_grad_(x.is_floating_point()) for x in inputs]
    outs = []
    for m, xs in ((module, cpu_in), (dev_module, dev_in)):
        out = m(*xs)
        flat = [o for o in (out if isinstance(out, tuple) else (out,)) for o in (o if isinstance(o, tuple) else (o,))]
        if read_first:
            [o.detach().cpu() for o in flat]
        sum(o.square().sum() * (k + 1) for k, o in enumerate(flat)).backward()
        outs.append((flat, [p.grad for p in m.parameters()], [x.grad for x in xs]))
    (c_out, c_pg, c_xg), (d_out, d_pg, d_xg) = outs
    for d, c in zip(d_out, c_out):
        assert_same(d, c, rtol=rtol, atol=atol, msg="output")
    for d, c in zip(d_pg + d_xg, c_pg + c_xg):
        assert (d is None) == (c is None)
        if c is not None:
            assert_same(d, c, rtol=rtol, atol=atol, msg="gradient")


@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(num_layers=2, batch_first=True),
                                dict(bidirectional=True), dict(proj_size=3)], ids=str)
def test_lstm(kw):
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4) if not kw.get("batch_first") else torch.randn(3, 5, 4)
    _compare(nn.LSTM(4, 6, **kw), [x])


@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(num_layers=2, batch_first=True),
                                dict(bidirectional=True)], ids=str)
def test_gru(kw):
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4) if not kw.get("batch_first") else torch.randn(3, 5, 4)
    _compare(nn.GRU(4, 6, **kw), [x])


@pytest.mark.parametrize("kw", [dict(), dict(nonlinearity="relu", bias=False), dict(num_layers=2, batch_first=True),
                                dict(bidirectional=True, nonlinearity="relu")], ids=str)
def test_rnn(kw):
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4) if not kw.get("batch_first") else torch.randn(3, 5, 4)
    _compare(nn.RNN(4, 6, **kw), [x])


def test_dropout_between_layers():
    # Dropout applies between layers in training only. With p = 1 every layer but the first sees
    # zeros (the same on any generator); in eval mode p = 0.5 changes nothing.
    torch.manual_seed(3)
    x = torch.randn(6, 2, 4)
    _compare(nn.LSTM(4, 5, num_layers=3, dropout=1.0), [x])
    _compare(nn.GRU(4, 5, num_layers=2, dropout=1.0, bidirectional=True), [x])
    _compare(nn.LSTM(4, 5, num_layers=2, dropout=0.5).eval(), [x])


@pytest.mark.parametrize("kind, kw", [(nn.LSTM, dict(num_layers=2)), (nn.LSTM, dict(bidirectional=True)),
                                      (nn.GRU, dict(num_layers=2, bidirectional=True)),
                                      (nn.RNN, dict(bidirectional=True)), (nn.RNN, dict(nonlinearity="relu"))],
                         ids=str)
def test_double_backward(kind, kw):
    # Gradients taken with create_graph are differentiable again: a sequence node runs its steps
    # again as ops autograd records. float64, against the CPU.
    torch.manual_seed(5)
    module, x = kind(4, 5, **kw).double(), torch.randn(6, 3, 4, dtype=torch.float64)
    results = []
    for dev in ("cpu", DEV):
        m, xd = copy.deepcopy(module).to(dev), x.to(dev).requires_grad_()
        out, state = m(xd)
        loss = out.square().sum() + sum((k + 2) * s.sum() for k, s in enumerate(state if kind is nn.LSTM else [state]))
        first = torch.autograd.grad(loss, [xd, *m.parameters()], create_graph=True)
        second = torch.autograd.grad(sum(g.square().sum() for g in first), [xd, *m.parameters()])
        results.append(first + second)
    for got, want in zip(*reversed(results)):
        assert_same(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN], ids=["lstm", "gru", "rnn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_sequence_dtypes(kind, dtype):
    # the states and gates rounded to the dtype each step, as the per-step cells round them
    torch.manual_seed(6)
    tol = {torch.float16: (5e-3, 5e-3), torch.bfloat16: (3e-2, 3e-2), torch.float64: (1e-10, 1e-12)}[dtype]
    _compare(kind(4, 6, num_layers=2).to(dtype), [torch.randn(7, 3, 4, dtype=dtype)], *tol)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_state_gradients_and_frozen_weights(kind):
    # only the final states reach the loss; the initial states take gradients; W_hh of the first
    # layer is frozen (its gradient is not computed) and the outputs of the last are unused
    torch.manual_seed(7)
    module, x, h0, c0 = kind(3, 5, num_layers=2), torch.randn(6, 2, 3), torch.randn(2, 2, 5), torch.randn(2, 2, 5)
    module.weight_hh_l0.requires_grad_(False)
    grads = []
    for dev in ("cpu", DEV):
        m = copy.deepcopy(module).to(dev)
        xs = [t.detach().to(dev).requires_grad_() for t in ((x, h0, c0) if kind is nn.LSTM else (x, h0))]
        _, state = m(xs[0], tuple(xs[1:]) if kind is nn.LSTM else xs[1])
        h, c = state if kind is nn.LSTM else (state, state)
        (h.square().sum() + 2 * c.sum()).backward()
        assert m.weight_hh_l0.grad is None
        grads.append([t.grad for t in xs] + [p.grad for p in m.parameters() if p.requires_grad])
    for got, want in zip(*reversed(grads)):
        assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN], ids=["lstm", "gru", "rnn"])
def test_sequence_node_errors_match_the_cpu(kind):
    # a second backward through the freed graph, and a weight changed in place before the
    # backward, raise as on the CPU
    for dev in ("cpu", DEV):
        m, x = kind(3, 4).to(dev), torch.randn(5, 2, 3, device=dev)
        loss = m(x)[0].sum()
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
        out = m(x)[0]
        with torch.no_grad():
            m.weight_hh_l0.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN], ids=["lstm", "gru", "rnn"])
def test_functorch_grad_through_sequences(kind):
    # torch.func.grad wraps the tensors: the sequence takes ATen's per-step ops, whose
    # transforms functorch knows (the sequence node reads engine values, which a wrapper has not)
    from torch.func import functional_call, grad
    torch.manual_seed(8)
    module, x = kind(3, 4), torch.randn(5, 2, 3)
    results = []
    for dev in ("cpu", DEV):
        m = copy.deepcopy(module).to(dev)
        params = {k: v.detach() for k, v in m.named_parameters()}
        g = grad(lambda p, xx: functional_call(m, p, (xx,))[0].square().sum())(params, x.to(dev))
        results.append([g[k] for k in sorted(g)])
    for got, want in zip(*reversed(results)):
        assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_sequences_in_inference_mode():
    torch.manual_seed(4)
    x = torch.randn(7, 3, 4)
    for module in (nn.LSTM(4, 5, num_layers=2, bidirectional=True), nn.GRU(4, 5), nn.RNN(4, 5)):
        dev_module = copy.deepcopy(module).to(DEV)
        with torch.inference_mode():
            want, got = module(x), dev_module(to_dev(x))
        for w, g in zip(want, got):
            assert_same(g, w, rtol=1e-5, atol=1e-6)


def _autograd_nodes(out, name):
    """How many nodes of out's autograd graph have `name` in their name, in lower case."""
    seen, todo, count = set(), [out.grad_fn], 0
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        count += name in fn.name().lower()
        todo.extend(f for f, _ in fn.next_functions)
    return count


@pytest.mark.parametrize("module", [nn.LSTM(4, 6, num_layers=2), nn.GRU(4, 6, bidirectional=True), nn.RNN(4, 6)],
                         ids=["lstm", "gru", "rnn"])
def test_input_products_join_all_steps(module):
    # Off the CPU, ATen's composite multiplies each step's input by W_ih on its own (a product and
    # its gradients per step); as on the CPU, each layer and direction takes one over all steps:
    # one input product each. Each direction is one autograd node over all its steps, its hidden
    # products inside it.
    requires_tiny()
    steps = 9
    out = copy.deepcopy(module).to(DEV)(torch.randn(steps, 2, 4, device=DEV))[0]
    runs = module.num_layers * (2 if module.bidirectional else 1)
    assert _autograd_nodes(out, "mm") == runs  # MmBackward0, AddmmBackward0
    assert _autograd_nodes(out, "sequencebackward") == runs


def test_sequence_errors_match_the_cpu():
    # calls nn.LSTM's checks do not catch reach ATen: the same errors as the CPU's
    lstm, gru = nn.LSTM(3, 4), nn.GRU(3, 4)
    for dev in ("cpu", DEV):
        x, h = torch.randn(5, 2, 3, device=dev), torch.zeros(1, 2, 4, device=dev)
        w = [p.to(dev) for p in lstm._flat_weights]
        with pytest.raises(RuntimeError, match="two hidden states"):
            torch.lstm(x, (h,), w, True, 1, 0.0, False, False, False)
        with pytest.raises(RuntimeError, match="Expected more hidden states"):
            torch.gru(x, torch.zeros(2, 2, 4, device=dev), [p.to(dev) for p in gru._flat_weights], True, 1, 0.0,
                      False, False, False)
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.gru(x[..., :2], h, [p.to(dev) for p in gru._flat_weights], True, 1, 0.0, False, False, False)
        with pytest.raises(RuntimeError, match="sequence length to be larger than 0"):
            lstm.to(dev)(torch.randn(0, 2, 3, device=dev))


class WithState(nn.Module):
    """An RNN or cell called with a given initial state: (h) or (h, c)."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *state):
        return self.rnn(x, state if len(state) > 1 else state[0])


def test_initial_states_and_cells():
    torch.manual_seed(1)
    x, h0, c0 = torch.randn(7, 2, 3), torch.randn(1, 2, 5), torch.randn(1, 2, 5)
    _compare(WithState(nn.LSTM(3, 5)), [x, h0, c0])
    _compare(WithState(nn.GRU(3, 5)), [x, h0])
    _compare(WithState(nn.LSTMCell(3, 5)), [torch.randn(4, 3), torch.randn(4, 5), torch.randn(4, 5)])
    _compare(nn.LSTMCell(3, 5), [torch.randn(4, 3)])
    _compare(WithState(nn.GRUCell(3, 5, bias=False)), [torch.randn(4, 3), torch.randn(4, 5)])


def test_unbatched_and_empty_sequences():
    torch.manual_seed(2)
    _compare(nn.LSTM(3, 4), [torch.randn(6, 3)])  # unbatched (L, H_in)
    _compare(nn.GRU(3, 4, batch_first=True), [torch.randn(0, 6, 3)])  # empty batch


def test_fused_cell_errors():
    requires_tiny()
    g = torch.randn(2, 8, device=DEV)
    with pytest.raises(RuntimeError, match="state"):
        torch.ops.aten._thnn_fused_lstm_cell(g, g, torch.randn(2, 3, device=DEV))
    with pytest.raises(RuntimeError, match="differ in size"):
        torch.ops.aten._thnn_fused_gru_cell(torch.randn(2, 6, device=DEV), torch.randn(3, 6, device=DEV),
                                   torch.randn(2, 2, device=DEV))


class _LoopRNN(nn.Module):
    """An RNN written as users write one: a Linear per step, the same weights every step."""

    def __init__(self, n_in, hidden):
        super().__init__()
        self.ih, self.hh = nn.Linear(n_in, hidden), nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], self.hh.in_features)
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.ih(x[:, t]) + self.hh(h))
            outs.append(h)
        return torch.stack(outs, 1)


@pytest.mark.parametrize("steps", [1, 2, 17, 40])
def test_weights_shared_across_steps(steps):
    # each weight's gradient is a sum of one product per step, over one step's batch: the
    # engine joins them into one product over every step (stored in runs past 16 steps)
    torch.manual_seed(0)
    _compare(_LoopRNN(5, 7), [torch.randn(3, steps, 5)])


def test_short_products_added_share_one_kernel():
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    parts = [(torch.randn(6, 4), torch.randn(4, 9)) for _ in range(12)]
    want = sum(a @ b for a, b in parts)
    got = sum(to_dev(a) @ to_dev(b) for a, b in parts)
    with debug.count_kernels() as c:
        got.cpu()
    assert_same(got, want, rtol=1e-5, atol=1e-5)
    assert c.kernels == 1


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("steps", [50, 100])
def test_small_recurrences_store_their_states(kind, steps):
    # With 8 hidden units each step's product (8 terms) may be fused into the cell's kernel. The
    # cell state then loaded only three buffers (the input product, two biases), too few for
    # a recurrence state, and was never stored: at 50 and 100 steps every step's kernel
    # recomputed all earlier cells, a kernel read up to 310 buffers and compiling took 58 s.
    # Products of a few terms now count as loads; a kernel reads the same few buffers at any
    # length (at most 83 here, for the weight gradients' joins).
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    module, x = kind(4, 8), torch.randn(steps, 2, 4)
    with debug.trace() as t:
        _compare(module, [x])
    assert max(len(k.inputs) for k in t.kernels) <= 96


def test_long_sequences():
    # 1,000 steps: scheduling walks each recurrence once (it walked every earlier step from
    # each one: 500 steps took 10 s, 3,000 more than 10 minutes).
    torch.manual_seed(0)
    _compare(nn.LSTM(4, 8), [torch.randn(1000, 2, 4)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_outputs_read_before_the_backward(kind):
    # Each direction runs as two subgraph calls, forward and backward, the backward built over
    # the forward's values. Read first, the forward is realized on its own; the backward's call
    # then computes again what it needs of the forward. Initial states given (not constants).
    torch.manual_seed(0)
    module = kind(4, 6, num_layers=2, bidirectional=True)
    states = (torch.randn(4, 3, 6), torch.randn(4, 3, 6)) if kind is nn.LSTM else torch.randn(4, 3, 6)

    class WithStates(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = module

        def forward(self, x, *s):
            return self.rnn(x, tuple(s) if kind is nn.LSTM else s[0])

    flat_states = list(states) if kind is nn.LSTM else [states]
    _compare(WithStates(), [torch.randn(7, 3, 4)] + flat_states, read_first=True)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_training_step_graph_does_not_grow_with_the_sequence(kind):
    # A direction's steps are built once per shape, as subgraphs; a training step's graph holds
    # one call of each direction's forward and backward, whatever the sequence length (an LSTM
    # step of 128 steps was 7,672 nodes to build, key and release each time; now 112).
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    nodes = {}
    for steps in (8, 64):
        m = kind(4, 6, batch_first=True).to(DEV)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        x = torch.randn(2, steps, 4).to(DEV)
        for i in range(3):
            with debug.count_kernels() as c:
                opt.zero_grad()
                loss = m(x)[0].square().mean()
                loss.backward()
                opt.step()
                loss.item()
        nodes[steps] = c.graph_nodes
    assert nodes[8] == nodes[64] < 200, nodes


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_loss_read_before_the_backward_costs_no_recurrence_again(kind):
    # Read first, the forward's call is realized on its own; what its schedule stored of its
    # steps is kept with the call, and the backward's call reads it: the step runs about the
    # kernels of a step that reads its loss at the end (LSTM 69 and 70; computing the forward's
    # recurrence again in the backward, 69 and 96).
    requires_tiny()
    from torch_tiny import debug
    kernels = {}
    for read_first in (False, True):
        torch.manual_seed(0)
        m = kind(4, 6, batch_first=True).to(DEV)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        x = torch.randn(2, 16, 4).to(DEV)
        for i in range(3):
            with debug.count_kernels() as c:
                opt.zero_grad()
                loss = m(x)[0].square().mean()
                if read_first:
                    loss.item()
                loss.backward()
                opt.step()
                loss.item()
        kernels[read_first] = c.kernels
    assert kernels[True] <= kernels[False] + 4, kernels


def test_lstm_training_steps_replay_their_schedule():
    # The weight gradients' sums over 20 steps are joined when scheduled, the runs of 16 steps
    # stored in buffers of the schedule's own: from the third step on, each step replays the
    # cached schedule (none is built again) and keeps the CPU's values.
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    model, x = nn.LSTM(6, 10, batch_first=True), torch.randn(3, 20, 6)
    losses = {}
    for dev in ("cpu", DEV):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        xd = x.to(dev)
        losses[dev] = []
        for i in range(5):
            if i == 2 and dev == DEV:
                schedules = debug.counters()["schedules"]
            opt.zero_grad()
            loss = m(xd)[0].square().mean()
            loss.backward()
            opt.step()
            losses[dev].append(loss.detach().cpu())
        if dev == DEV:
            assert debug.counters()["schedules"] == schedules
    for got, want in zip(losses[DEV], losses["cpu"]):
        assert_same(got, want, check_device=False, rtol=1e-4, atol=1e-5)


def test_stored_gradients_free_the_graph_that_summed_them():
    # A weight's gradient is a sum over the time steps, each with its own buffers. Once the step
    # is realized, only the gradients' own bytes stay: nothing but the parameters, their
    # gradients and the input is allocated (the sums' graphs kept 1.7 times as much alive until
    # zero_grad here). The gradients still read as the CPU's.
    requires_tiny()
    torch.manual_seed(0)
    model, x = nn.LSTM(16, 32, batch_first=True), torch.randn(2, 24, 16)
    grads = {}
    gc.collect()
    torch.tiny.synchronize()
    base = torch.tiny.memory_allocated()
    for dev in ("cpu", DEV):
        m, xd = copy.deepcopy(model).to(dev), x.to(dev)
        loss = m(xd)[0].square().mean()
        loss.backward()
        loss.item()
        del loss
        if dev == DEV:
            torch.tiny.synchronize()
            # (at most: the two biases' gradients are one value, stored once)
            live = sum(2 * p.numel() * 4 for p in m.parameters()) + xd.numel() * 4
            assert torch.tiny.memory_allocated() - base <= live
        grads[dev] = [p.grad for p in m.parameters()]
    for got, want in zip(grads[DEV], grads["cpu"]):
        assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_gru_training_step_kernel_count():
    # A GRU's AdamW step over 32 steps: the large elementwise values of its gradient recurrence,
    # each read from every later step's kernel, are stored where the scheduler first finds them
    # read too often (it stops walking there): 139 kernels, where it took 196; with all steps'
    # input products one product (and its gradients one each), 110; with each direction one
    # sequence node (W_hh's gradient one product), 106. Values as the CPU's.
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    model, x = nn.GRU(128, 256, batch_first=True), torch.randn(8, 32, 128)
    results = []
    for dev in ("cpu", DEV):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        xd = x.to(dev)

        def step():
            opt.zero_grad()
            loss = m(xd)[0].square().mean()
            loss.backward()
            opt.step()
            return loss.detach().cpu()
        step()
        with debug.count_kernels() as c:
            loss = step()
        results.append((loss, [p.detach() for p in m.parameters()], c.kernels))
    (c_loss, c_params, _), (d_loss, d_params, kernels) = results
    assert_same(d_loss, c_loss, check_device=False, rtol=1e-4, atol=1e-5)
    for d, c in zip(d_params, c_params):
        assert_same(d, c, rtol=1e-4, atol=1e-5)
    assert kernels <= 106
