"""DistributedOptimizer, state broadcasts and the remaining collectives, under kolorun."""
import pytest
import torch

import kolo.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
B = 12 * N  # global batch


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def batches(steps):
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(B, 5, generator=g), torch.randn(B, 3, generator=g)) for _ in range(steps)]


def train_reference(steps, micro=1):
    """One process, the whole batch: what N ranks must reproduce."""
    model = make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


@pytest.mark.parametrize("backward_passes_per_step", [1, 2])
def test_n_ranks_with_b_over_n_samples_match_one_process_with_b(backward_passes_per_step):
    steps, k = 5, backward_passes_per_step
    model = make_model(100 + R)  # different start on every rank...
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=k)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # ...made equal
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    reference = make_model(0)
    with torch.no_grad():  # the reference starts from rank 0's broadcast weights
        for p, q in zip(reference.parameters(), model.parameters()):
            p.copy_(q)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(steps):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        shard = slice(R * B // N, (R + 1) * B // N)
        xs, ys = x[shard].chunk(k), y[shard].chunk(k)
        for xm, ym in zip(xs, ys):
            # Mean over the micro-batch, divided by k: the accumulated gradient is the
            # shard's mean, and the average over ranks the global batch's mean.
            (torch.nn.functional.mse_loss(model(xm), ym) / k).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=1e-4), (name, (p - q).abs().max())


def test_broadcast_optimizer_state_sgd_momentum_and_adam():
    for make_opt in (lambda ps: torch.optim.SGD(ps, lr=0.1 * (R + 1), momentum=0.5 + 0.1 * R),
                     lambda ps: torch.optim.Adam(ps, lr=0.01 * (R + 1))):
        model = make_model(7)
        opt = make_opt(model.parameters())
        if R == 0:  # only the root has stepped: others' state is still empty
            model(torch.randn(2, 5)).sum().backward()
            opt.step()
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        states = hvd.allgather_object(
            {k: (v if not torch.is_tensor(v) else v.tolist()) for k, v in
             sorted(opt.state_dict()["param_groups"][0].items()) if k != "params"})
        assert all(s == states[0] for s in states)
        sd = opt.state_dict()["state"]
        assert len(sd) == len(list(model.parameters()))
        first = next(iter(sd.values()))
        key = "momentum_buffer" if "momentum_buffer" in first else "exp_avg"
        gathered = hvd.allgather(first[key].flatten().unsqueeze(0))
        assert all(torch.equal(gathered[r], gathered[0]) for r in range(N))


def test_unused_parameters_are_reduced_as_zeros():
    model = make_model(0)
    extra = torch.nn.Linear(2, 2)
    params = list(model.parameters()) + list(extra.parameters())
    named = list(model.named_parameters()) + [("extra." + n, p) for n, p in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named)
    model(torch.randn(3, 5)).sum().backward()  # extra never gets a gradient
    opt.step()
    assert torch.equal(extra.weight.grad, torch.zeros(2, 2))


def test_bad_optimizer_arguments():
    model = make_model(0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="must be unique"):
        hvd.DistributedOptimizer(sgd, named_parameters=[("w", named[0][1]), ("w", named[1][1])])
    with pytest.raises(ValueError, match="were not named"):
        hvd.DistributedOptimizer(sgd, named_parameters=named[:1])
    with pytest.raises(ValueError, match="op must be one of"):
        hvd.DistributedOptimizer(sgd, op=7)


def test_zero_grad_refuses_while_allreduces_are_pending_and_clipping_works():
    model = make_model(0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.randn(4, 5)).sum().backward()
    with pytest.raises(AssertionError, match="before optimizer.step"):
        opt.zero_grad()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()


def test_a_subclass_of_the_wrapped_optimizer_steps_and_zeroes():
    # Lightning's LightningOptimizer subclasses the optimizer's class; the wrapper's
    # methods must reach torch's, not themselves again (Horovod's super(self.__class__)
    # recursed forever there).
    model = make_model(0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    opt.__class__ = type("Sub" + type(opt).__name__, (type(opt),), {})
    x, y = batches(1)[0]
    torch.nn.functional.mse_loss(model(x[R::N]), y[R::N]).backward()
    opt.step()
    opt.zero_grad()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    again = [p.detach().clone() for p in model.parameters()]
    for p, q in zip(again, hvd.allgather_object(again)[0]):
        assert torch.equal(p, q)  # the same step on every rank


@pytest.mark.skipif(not hasattr(torch.optim.Optimizer, "register_step_pre_hook"),
                    reason="torch %s has no optimizer step hooks (PyTorch 2.0 added them)"
                    % torch.__version__)
def test_step_hooks_run_once_per_step_and_see_reduced_gradients():
    model = make_model(0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    seen = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append(model[0].bias.grad.clone()))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append("post"))
    for _ in range(2):
        opt.zero_grad()
        (model(torch.ones(2, 5)).sum() * (R + 1)).backward()
        opt.step()
    assert [x if isinstance(x, str) else "pre" for x in seen] == ["pre", "post"] * 2, seen
    gathered = hvd.allgather(seen[0].unsqueeze(0))  # the average, the same on every rank
    assert all(torch.equal(gathered[r], gathered[0]) for r in range(N)), gathered


@pytest.mark.skipif(not hasattr(torch, "compile"),
                    reason="torch %s has no torch.compile (PyTorch 2.0 added it)"
                    % torch.__version__)
def test_compiled_model_trains_like_one_process():
    # aot_eager: AOTAutograd's joint graph, as inductor builds it, without a C++ compiler.
    model, reference = make_model(0), make_model(0)
    compiled = torch.compile(model, backend="aot_eager")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in batches(3):
        shard = slice(R * B // N, (R + 1) * B // N)
        opt.zero_grad()
        torch.nn.functional.mse_loss(compiled(x[shard]), y[shard]).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=1e-4), (p - q).abs().max()


def test_fp16_compression_averages_gradients():
    model = make_model(0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    for p in model.parameters():
        p.grad = None
    (model(torch.ones(1, 5)).sum() * (R + 1)).backward()
    opt.step()
    grads = hvd.allgather(model[0].bias.grad.unsqueeze(0))
    assert grads.dtype == torch.float32 and torch.equal(grads[0], grads[-1])


def test_grouped_alltoall_reducescatter():
    outs = hvd.grouped_allreduce([torch.ones(3) * (R + 1), torch.ones(2, 2)], op=hvd.Sum)
    assert torch.equal(outs[0], torch.full((3,), N * (N + 1) / 2.0))
    assert torch.equal(outs[1], torch.full((2, 2), float(N)))
    splits = [(R + j) % 2 + 1 for j in range(N)]
    data = torch.cat([torch.full((s,), float(100 * R + j)) for j, s in enumerate(splits)])
    out, received = hvd.alltoall(data, splits=splits)
    assert received.tolist() == [(src + R) % 2 + 1 for src in range(N)]
    want = torch.cat([torch.full(((src + R) % 2 + 1,), float(100 * src + R)) for src in range(N)])
    assert torch.equal(out, want)
    rs = hvd.reducescatter(torch.ones(2 * N + 1, 3), op=hvd.Sum)
    assert rs.shape == ((2 * N + 1) // N + (1 if R < (2 * N + 1) % N else 0), 3)
    assert torch.equal(rs, torch.full(rs.shape, float(N)))


def test_join_with_uneven_batch_counts():
    model = make_model(0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    for step in range(R + 2):  # rank r runs r + 2 steps
        opt.zero_grad()
        model(torch.randn(2, 5)).sum().backward()
        opt.step()
    assert hvd.join() == N - 1
    hvd.barrier()


def test_process_sets_from_python(tmp_path):
    evens = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    assert evens.process_set_id >= 1
    x = torch.full((2,), float(R))
    if evens.included():
        out = hvd.allreduce(x, op=hvd.Sum, process_set=evens)
        assert torch.equal(out, torch.full((2,), float(sum(range(0, N, 2)))))
        assert evens.rank() == R // 2 and evens.size() == (N + 1) // 2
    else:
        with pytest.raises(ValueError, match="not a member of process set"):
            hvd.allreduce(x, process_set=evens)
    hvd.remove_process_set(evens)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(x, process_set=evens)
    assert hvd.global_process_set.process_set_id == 0


def test_timeline_from_python(tmp_path):
    path = tmp_path / "timeline.json"
    hvd.start_timeline(str(path), mark_cycles=True)
    hvd.allreduce(torch.ones(3), name="timeline.tensor")
    hvd.stop_timeline()
    if R == 0:
        import json
        events = json.loads(path.read_text())
        names = {e.get("name") for e in events} | {
            e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        # Horovod's names: the row "<op>.<name>", the phases NEGOTIATE_<OP> and <OP>.
        assert {"allreduce.timeline.tensor", "NEGOTIATE_ALLREDUCE", "ALLREDUCE",
                "CYCLE_START"} <= names, sorted(names)


def test_autograd_backward_rules():
    # Horovod's rules (test_horovod_compat.py checks every variant).
    # allreduce (average): d/dx sum(allreduce(x) * w) = average over ranks of w.
    x = torch.ones(3, requires_grad=True)
    w = torch.full((3,), float(R + 1))
    (hvd.allreduce(x, name="ag.ar") * w).sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), (N + 1) / 2.0))
    # allgather: each rank's slice receives the average over ranks of the upstream gradient.
    x = torch.ones(R + 1, 2, requires_grad=True)
    out = hvd.allgather(x, name="ag.ag")
    (out * (R + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((R + 1, 2), (N + 1) / 2.0))
    # broadcast: the root gets the averaged gradient, others zero.
    x = torch.ones(2, requires_grad=True)
    hvd.broadcast(x, 0, name="ag.bc").sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 1.0 if R == 0 else 0.0))
    # alltoall: the gradient goes back to where the rows came from.
    splits = [1] * N
    x = torch.arange(float(N), requires_grad=True)
    out, _ = hvd.alltoall(x, splits=splits, name="ag.a2a")
    (out * torch.arange(1.0, N + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((N,), float(R + 1)))
    # reducescatter (sum): the allgather of the upstream gradients, times the size.
    x = torch.ones(N, 2, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Sum, name="ag.rs").sum().backward()
    assert torch.equal(x.grad, torch.full((N, 2), float(N)))


def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch():
    g = torch.Generator().manual_seed(5)
    x_all = torch.randn(4 * N, 3, 5, generator=g) * 2 + 1
    upstream = torch.randn(4 * N, 3, 5, generator=g)
    ref = torch.nn.BatchNorm1d(3)
    sync = hvd.SyncBatchNorm(3)
    with torch.no_grad():
        for m in (ref, sync):
            m.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
            m.bias.copy_(torch.tensor([0.0, -1.0, 3.0]))
    x_ref = x_all.clone().requires_grad_()
    y_ref = ref(x_ref)  # one training-mode call: running stats updated once
    (y_ref * upstream).sum().backward()
    shard = slice(4 * R, 4 * R + 4)
    x = x_all[shard].clone().requires_grad_()
    y = sync(x)
    (y * upstream[shard]).sum().backward()
    assert torch.allclose(y, y_ref[shard].detach(), atol=1e-5)
    assert torch.allclose(x.grad, x_ref.grad[shard], atol=1e-5), (x.grad - x_ref.grad[shard]).abs().max()
    assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(sync.running_var, ref.running_var, atol=1e-5)
    # Weight gradients are per rank (summed by DistributedOptimizer's average * N).
    wg = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    assert torch.allclose(wg, ref.weight.grad, atol=1e-4)
    sync.eval()
    assert torch.allclose(sync(x_all), ref.eval()(x_all), atol=1e-5)
