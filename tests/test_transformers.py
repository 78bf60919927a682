"""HuggingFace transformers on the device: a GPT-2 built from a small config (nothing is
downloaded) trains as on the CPU, its tied weights staying tied, with an optimizer made before the
model moved; greedy generate() gives the CPU's tokens; a compiled forward matches.
"""
import copy

import pytest
import torch

from conftest import DEV, IS_TINY, assert_same, to_dev

transformers = pytest.importorskip("transformers")


def _gpt2(seed=0):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=64, vocab_size=101, n_positions=32,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
        # dropout draws from the device's generator, not the CPU's: off, so numbers can match
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


def _train(model, device, ids, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # made before the move, as users do
    model.to(device)
    assert model.lm_head.weight is model.transformer.wte.weight
    x = ids.to(device)
    losses, kernels = [], []
    for _ in range(steps):
        counter = None
        if IS_TINY and device != "cpu":
            from torch_tiny import debug
            counter = debug.count_kernels()
            counter.__enter__()
        opt.zero_grad()
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
        if counter is not None:
            torch.tiny.synchronize()
            counter.__exit__(None, None, None)
            kernels.append(counter.kernels)
    return losses, kernels


def test_gpt2_training_matches_cpu_loss_for_loss():
    base = _gpt2()
    ids = torch.randint(0, 101, (4, 16))
    cpu_model, dev_model = copy.deepcopy(base), copy.deepcopy(base)
    cpu_losses, _ = _train(cpu_model, "cpu", ids, 4)
    dev_losses, kernels = _train(dev_model, DEV, ids, 4)
    assert cpu_losses[-1] < cpu_losses[0] - 0.3  # it learns
    for step, (a, e) in enumerate(zip(dev_losses, cpu_losses)):
        assert abs(a - e) <= 1e-5 * abs(e), f"step {step}: loss {a} != cpu {e}"
    # the tied embedding got both its gradients (input embedding and output projection)
    assert dev_model.lm_head.weight is dev_model.transformer.wte.weight
    # AdamW steps about lr * sign(gradient) whatever the gradient's size, and the key bias's
    # gradient is zero up to rounding (softmax ignores a per-row constant): its elements step
    # by rounding noise on either device. Compare how far each tensor moved, as vectors.
    for (name, p), pd, p0 in zip(cpu_model.named_parameters(), dev_model.parameters(), base.parameters()):
        diff, moved = (pd.detach().cpu() - p.detach()).norm(), (p.detach() - p0).norm()
        assert diff <= 1e-2 * moved, f"{name}: |{DEV} - cpu| = {diff} vs |update| = {moved}"
    if kernels:
        # Today 98 from the second step on (AdamW's state exists), in 3 realizes (a host check
        # of the token ids, the loss's .item(), the rest): 67 compute reduces (matmuls, layer-norm
        # and softmax statistics), whose tiled kernels a fused reduce cannot loop over; the
        # parameter updates mostly fuse with the gradients' last kernels. 100 before each MLP's
        # GELU (its tanh realized alone) became its first linear layer's epilogue.
        assert kernels[2] == kernels[3]
        assert kernels[3] <= 98


def test_gpt2_greedy_generate_matches_cpu():
    model = _gpt2(1).eval()
    prompt = torch.randint(1, 101, (2, 5))
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=8, do_sample=False)
        actual = copy.deepcopy(model).to(DEV).generate(to_dev(prompt), max_new_tokens=8, do_sample=False)
    assert_same(actual, expected)


def test_gpt2_compiled_forward_matches_cpu():
    if not IS_TINY:
        pytest.skip("backend='tiny' compiles for tiny tensors")
    torch._dynamo.reset()
    model = _gpt2(2)
    ids = torch.randint(0, 101, (2, 12))
    expected = model(input_ids=ids, labels=ids)
    dev_model = copy.deepcopy(model).to(DEV)
    actual = torch.compile(dev_model, backend="tiny")(input_ids=to_dev(ids), labels=to_dev(ids))
    assert_same(actual.logits, expected.logits, rtol=1e-4, atol=1e-5)
    assert_same(actual.loss, expected.loss, rtol=1e-5, atol=0)
    actual.loss.backward()
    expected.loss.backward()
    for (name, p), pd in zip(model.named_parameters(), dev_model.parameters()):
        assert_same(pd.grad, p.grad, rtol=1e-3, atol=1e-6, msg=name)
    torch._dynamo.reset()
