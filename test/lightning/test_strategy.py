"""kolo.lightning's KoloStrategy under kolorun (np=2 and np=3): Trainer(strategy="kolo") on the
CPU, checked against kolo.torch's own collectives and against one process without Lightning's
distribution.

Equivalence: N ranks with B/N samples per step reach the parameters that one process reaches
with B samples per step (plain PyTorch, same initial weights, same batches in the same order),
within 1e-10 in float64 (Trainer(precision="64-true")): the only difference is the order of the
floating-point sums.
"""
import copy
import math
import os
import pathlib
import subprocess
import sys
import time
import warnings

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.strategies import StrategyRegistry
from lightning_utilities.core.rank_zero import rank_zero_only
from torch.distributed import ReduceOp
from torch.utils.data import DataLoader, TensorDataset

import kolo.lightning  # noqa: F401  (registers strategy="kolo")
import kolo.torch as kt
from kolo.lightning import KoloEnvironment, KoloStrategy

TOLERANCE = 1e-10  # float64
SAMPLES = 36  # divisible by 2, 3 and every global batch below: no padded or short batch
GLOBAL_BATCH = 6

kt.init()
RANK, SIZE = kt.rank(), kt.size()


def make_trainer(module=pl, **kwargs):
    options = dict(strategy="kolo", accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    options.update(kwargs)
    return module.Trainer(**options)


def gathered(tensor):
    """Every rank's tensor stacked, by kolo.torch (not by the strategy under test)."""
    return kt.allgather(tensor.detach().reshape(1, *tensor.shape).contiguous())


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def mlp_class(base):
    """A small regression MLP as a LightningModule of `base` (lightning.pytorch's or
    pytorch_lightning's)."""

    class MLP(base):
        def __init__(self, lr=0.1, momentum=0.9, seed=0, manual=False):
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(seed)
            self.net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(),
                                           torch.nn.Linear(4, 1))
            self.automatic_optimization = not manual

        def forward(self, x):
            return self.net(x)

        def loss(self, batch):
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def training_step(self, batch, batch_idx):
            if self.automatic_optimization:
                return self.loss(batch)
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.loss(batch))
            opt.step()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(batch), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr,
                                   momentum=self.hparams.momentum)

    return MLP


MLP = mlp_class(pl.LightningModule)


def regression_data(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 5, generator=g, dtype=dtype)
    y = torch.sin(x.sum(dim=1, keepdim=True)) + 0.1 * torch.randn(SAMPLES, 1, generator=g,
                                                                   dtype=dtype)
    return x, y


def loader(batch_size, dtype=torch.float64):
    return DataLoader(TensorDataset(*regression_data(dtype)), batch_size=batch_size)


def one_process(model, batch, fits=1, accumulate=1):
    """What the ranks together must compute: plain PyTorch in this process, `batch` samples
    per backward, Lightning's accumulation rule (the loss divided by `accumulate`, a step every
    `accumulate` batches and after an epoch's last one), one epoch per fit, a new optimizer
    every fit.

    The order of the samples: Lightning gives each training dataloader a
    DistributedSampler(shuffle=True, seed=0), which permutes the samples with the seed plus
    the epoch and gives rank r every N-th of them from the r-th on, so that step k of the N
    ranks covers permuted samples k*B .. (k+1)*B - 1 together."""
    model = copy.deepcopy(model).double()
    x, y = regression_data()
    batches = SAMPLES // batch
    for _ in range(fits):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(0))
        opt = model.configure_optimizers()
        for i in range(batches):
            rows = order[i * batch:(i + 1) * batch]
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
            (loss / accumulate).backward()
            if (i + 1) % accumulate == 0 or i + 1 == batches:
                opt.step()
                opt.zero_grad()
    return model


@pytest.fixture(scope="module")
def strategy():
    return make_trainer().strategy


# --- who is who ----------------------------------------------------------------------------

def test_trainer_strategy_kolo_is_registered_and_takes_ranks_from_kolo():
    assert "kolo" in StrategyRegistry.available_strategies()
    trainer = make_trainer()
    s = trainer.strategy
    assert isinstance(s, KoloStrategy)
    assert RANK == int(os.environ["RANK"]) and SIZE == int(os.environ["WORLD_SIZE"])
    assert (trainer.global_rank, trainer.world_size, trainer.local_rank) == \
        (RANK, SIZE, kt.local_rank())
    assert (trainer.node_rank, trainer.num_nodes) == (0, 1)
    assert trainer.is_global_zero == (RANK == 0)
    assert rank_zero_only.rank == RANK
    assert s.root_device == torch.device("cpu")
    assert s.distributed_sampler_kwargs == {"num_replicas": SIZE, "rank": RANK}
    env = s.cluster_environment
    assert isinstance(env, KoloEnvironment)
    assert (env.global_rank(), env.world_size(), env.local_rank(), env.node_rank()) == \
        (RANK, SIZE, kt.local_rank(), 0)


# --- collectives ---------------------------------------------------------------------------

MEAN = (SIZE + 1) / 2
SUM = SIZE * (SIZE + 1) / 2
PRODUCT = math.factorial(SIZE)


@pytest.mark.parametrize("reduce_op, want", [
    ("mean", [MEAN, -MEAN]), (None, [MEAN, -MEAN]), ("avg", [MEAN, -MEAN]),
    (ReduceOp.AVG, [MEAN, -MEAN]), ("sum", [SUM, -SUM]), ("SUM", [SUM, -SUM]),
    (ReduceOp.SUM, [SUM, -SUM]), ("max", [SIZE, -1]), (ReduceOp.MAX, [SIZE, -1]),
    ("min", [1, -SIZE]), (ReduceOp.MIN, [1, -SIZE]),
    ("product", [PRODUCT, (-1) ** SIZE * PRODUCT]),
    (ReduceOp.PRODUCT, [PRODUCT, (-1) ** SIZE * PRODUCT]),
])
def test_reduce_every_op_in_place(strategy, reduce_op, want):
    t = torch.tensor([RANK + 1.0, -(RANK + 1.0)])
    out = strategy.reduce(t, reduce_op=reduce_op)
    assert out is t, "reduced in place, as Lightning's DDP"
    assert out.tolist() == pytest.approx(want), "rank %d" % RANK


def test_reduce_integer_mean_scalar_and_non_contiguous(strategy):
    ints = strategy.reduce(torch.tensor([RANK, 10 * RANK]), reduce_op="mean")
    total = SIZE * (SIZE - 1) // 2
    assert ints.dtype == torch.int64
    assert ints.tolist() == [int(total / SIZE), int(10 * total / SIZE)], "DDP's truncation"
    scalar = strategy.reduce(torch.tensor(RANK + 1.0), reduce_op="sum")
    assert scalar.shape == () and scalar.item() == SUM
    base = torch.arange(6.0).reshape(2, 3) * (RANK + 1)
    strided = base.t()
    assert not strided.is_contiguous()
    out = strategy.reduce(strided, reduce_op="sum")
    assert out is strided and torch.equal(strided, torch.arange(6.0).reshape(2, 3).t() * SUM)
    assert strategy.reduce(2.5) == 2.5, "anything but a tensor comes back as it is"


def test_reduce_boolean_decision_over_ranks(strategy):
    assert strategy.reduce_boolean_decision(RANK == 0, all=False) is True
    assert strategy.reduce_boolean_decision(RANK == 0, all=True) is (SIZE == 1)
    assert strategy.reduce_boolean_decision(True) is True


def test_reduce_and_all_gather_refuse_what_they_cannot_do(strategy):
    with pytest.raises(ValueError, match="reduce_op='bxor'.*'mean', 'sum'"):
        strategy.reduce(torch.ones(1), reduce_op="bxor")
    with pytest.raises(ValueError, match="kolo.torch.ProcessSet"):
        strategy.reduce(torch.ones(1), group="WORLD")
    with pytest.raises(ValueError, match="kolo.torch.ProcessSet"):
        strategy.all_gather(torch.ones(1), group=object())


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_all_gather_stacks_every_rank_along_a_new_first_dimension(strategy, shape):
    pattern = torch.arange(float(math.prod(shape))).reshape(shape)
    out = strategy.all_gather(pattern + 100 * RANK)
    assert out.shape == (SIZE, *shape)
    for r in range(SIZE):
        assert torch.equal(out[r], pattern + 100 * r), "rank %d's row on rank %d" % (r, RANK)


def test_all_gather_sync_grads_gives_ddps_gradient(strategy):
    # Every rank computes the same loss from all rows: d loss / d (row r) = weight[r], and
    # rank r's input gets the sum over ranks of it, as under Lightning's DDP.
    x = torch.tensor([RANK + 1.0], requires_grad=True)
    rows = strategy.all_gather(x, sync_grads=True)
    weights = torch.arange(1.0, SIZE + 1).reshape(SIZE, 1)
    (rows * weights).sum().backward()
    assert rows.shape == (SIZE, 1)
    assert x.grad.tolist() == [SIZE * (RANK + 1.0)]
    assert not strategy.all_gather(x).requires_grad


class Payload:
    def __init__(self, rank):
        self.rank = rank
        self.path = pathlib.Path("/checkpoints/rank%d" % rank)
        self.tensor = torch.full((2,), float(rank))


@pytest.mark.parametrize("src", ["first", "last"])
def test_broadcast_gives_every_rank_the_sources_object(strategy, src):
    src = 0 if src == "first" else SIZE - 1
    got = strategy.broadcast({"rank": RANK, "payload": Payload(RANK), "none": None,
                              "text": "grüße %d" % RANK}, src=src)
    assert got["rank"] == src and got["none"] is None and got["text"] == "grüße %d" % src
    assert got["payload"].rank == src
    assert got["payload"].path == pathlib.Path("/checkpoints/rank%d" % src)
    assert torch.equal(got["payload"].tensor, torch.full((2,), float(src)))


def test_barrier_returns_once_every_rank_has_arrived(strategy):
    time.sleep(0.3 * RANK)
    arrived = time.time()
    strategy.barrier("test")
    left = time.time()
    times = gathered(torch.tensor([arrived, left], dtype=torch.float64))
    assert times[:, 1].min() >= times[:, 0].max(), times  # one machine: one clock


def test_torchmetrics_sync_over_kolo():
    import torchmetrics

    total = torchmetrics.SumMetric(**kolo.lightning.torchmetrics_kwargs())
    total.update(torch.tensor(RANK + 1.0))
    assert total.compute().item() == SUM
    rows = torchmetrics.CatMetric(**kolo.lightning.torchmetrics_kwargs())
    rows.update(torch.full((RANK + 1,), float(RANK)))  # a different length on every rank
    assert rows.compute().tolist() == [float(r) for r in range(SIZE) for _ in range(r + 1)]


# --- training ------------------------------------------------------------------------------

def test_every_rank_starts_from_rank_0s_weights_and_optimizer_state():
    seen = []

    class Record(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    # Different weights and a different learning rate on every rank; lr 0 on rank 0, so that
    # after the broadcasts no step changes a weight.
    model = MLP(lr=0.5 * RANK, momentum=0.0, seed=100 + RANK)
    before = gathered(flat(model))
    assert SIZE == 1 or not torch.equal(before[0], before[1])
    make_trainer(max_steps=2, callbacks=[Record()]).fit(model, loader(2, torch.float32))
    after = gathered(flat(model))
    for r in range(SIZE):
        assert torch.equal(after[r], before[0]), "rank %d does not hold rank 0's weights" % r
    assert seen == [0.0], "rank 0's param groups (unscaled) on rank %d" % RANK


def test_validate_also_starts_from_rank_0s_weights():
    model = MLP(seed=200 + RANK)
    before = gathered(flat(model))
    make_trainer().validate(model, loader(2, torch.float32), verbose=False)
    after = gathered(flat(model))
    for r in range(SIZE):
        assert torch.equal(after[r], before[0])


def counted_steps():
    """The training steps kolo counted for kolorun's monitor (docs/monitoring.md)."""
    import kolo.torch
    from kolo.common import engine
    return engine.counters()["steps"] if kolo.torch.is_initialized() else 0


@pytest.mark.parametrize("accumulate", [1, 2, 4])
def test_n_ranks_with_b_over_n_samples_match_one_process_with_b(accumulate):
    model = MLP(seed=7)
    want = one_process(model, GLOBAL_BATCH, accumulate=accumulate)
    trainer = make_trainer(max_epochs=1, precision="64-true", accumulate_grad_batches=accumulate)
    steps_before = counted_steps()
    trainer.fit(model, loader(GLOBAL_BATCH // SIZE))
    assert trainer.global_step == math.ceil(SAMPLES / GLOBAL_BATCH / accumulate)
    assert counted_steps() - steps_before == trainer.global_step, "the monitor's step count"
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.1, "the learning rate as configured"
    torch.testing.assert_close(flat(model), flat(want), rtol=0, atol=TOLERANCE)


def test_manual_optimization_matches_one_process():
    model = MLP(seed=8, manual=True)
    want = one_process(model, GLOBAL_BATCH)
    make_trainer(max_epochs=1, precision="64-true").fit(model, loader(GLOBAL_BATCH // SIZE))
    torch.testing.assert_close(flat(model), flat(want), rtol=0, atol=TOLERANCE)


def test_the_same_model_fits_twice():
    # The first fit's optimizer keeps its hooks on the parameters; they must not reduce
    # again in the second fit (its own optimizer's names would then be submitted twice).
    model = MLP(seed=9)
    want = one_process(model, GLOBAL_BATCH, fits=2)
    for _ in range(2):
        make_trainer(max_epochs=1, precision="64-true").fit(model, loader(GLOBAL_BATCH // SIZE))
    torch.testing.assert_close(flat(model), flat(want), rtol=0, atol=TOLERANCE)


def test_strategy_options_reach_the_distributed_optimizer():
    # One grouped allreduce per step, gradients sent as float16: every rank ends with the
    # same weights, near the exact ones.
    model = MLP(seed=15)
    want = one_process(model, GLOBAL_BATCH)
    strategy = KoloStrategy(compression=kt.Compression.fp16, groups=1)
    make_trainer(strategy=strategy, max_epochs=1, precision="64-true").fit(
        model, loader(GLOBAL_BATCH // SIZE))
    every = gathered(flat(model))
    for r in range(SIZE):
        assert torch.equal(every[r], every[0]), "rank %d differs from rank 0" % r
    torch.testing.assert_close(flat(model), flat(want), rtol=0, atol=1e-3)
    with pytest.raises(ValueError, match=r"groups=<list>\): groups is an int"):
        KoloStrategy(groups=[list(model.parameters())])


class WarmsUp(MLP):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.LinearLR(
            opt, start_factor=0.1, total_iters=2)}


def test_lr_scheduler_drives_the_wrapped_optimizer_without_warnings():
    seen = []

    class Record(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer = make_trainer(max_epochs=3, callbacks=[Record()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(WarmsUp(seed=14), loader(GLOBAL_BATCH // SIZE, torch.float32))
    assert seen == pytest.approx([0.01, 0.055, 0.1])
    assert trainer.lr_scheduler_configs[0].scheduler.optimizer is trainer.optimizers[0]
    about_order = [str(w.message) for w in caught
                   if "lr_scheduler" in str(w.message) or "optimizer.step()" in str(w.message)]
    assert about_order == []


class CountingIO(TorchCheckpointIO):
    def __init__(self):
        super().__init__()
        self.saved = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saved.append(os.path.basename(path))
        super().save_checkpoint(checkpoint, path, storage_options)


def test_checkpoint_is_written_once_by_rank_0_and_resumes(shared_dir):
    model, io = MLP(seed=10), CountingIO()
    trainer = make_trainer(max_epochs=2, precision="64-true", enable_checkpointing=True,
                           callbacks=[ModelCheckpoint(dirpath=shared_dir)], plugins=[io])
    trainer.fit(model, loader(GLOBAL_BATCH // SIZE))
    saved = kt.allgather_object(io.saved)
    files = sorted(os.listdir(shared_dir))
    steps = SAMPLES // GLOBAL_BATCH
    assert saved[0] == ["epoch=0-step=%d.ckpt" % steps, "epoch=1-step=%d.ckpt" % (2 * steps)]
    assert saved[1:] == [[]] * (SIZE - 1), "only rank 0 writes: %s" % saved
    assert files == ["epoch=1-step=%d.ckpt" % (2 * steps)]
    path = os.path.join(shared_dir, files[0])

    loaded = MLP.load_from_checkpoint(path)
    torch.testing.assert_close(flat(loaded), flat(model).float(), rtol=0, atol=0)  # a float32 MLP

    # A third epoch from the checkpoint (weights and momentum) equals three epochs at once.
    resumed = MLP(seed=11).double()  # Lightning loads the weights before it converts the model
    make_trainer(max_epochs=3, precision="64-true").fit(resumed, loader(GLOBAL_BATCH // SIZE),
                                                        ckpt_path=path)
    straight = MLP(seed=10)
    make_trainer(max_epochs=3, precision="64-true").fit(straight, loader(GLOBAL_BATCH // SIZE))
    torch.testing.assert_close(flat(resumed), flat(straight), rtol=0, atol=TOLERANCE)


class CountingLogger(Logger):
    def __init__(self):
        super().__init__()
        self.calls = 0

    @property
    def name(self):
        return "counting"

    @property
    def version(self):
        return 0

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        self.calls += 1

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs):
        pass


class LogsRank(MLP):
    def training_step(self, batch, batch_idx):
        self.log("rank_mean", float(RANK), on_step=False, on_epoch=True, sync_dist=True)
        self.log("rank_sum", float(RANK), on_step=False, on_epoch=True, sync_dist=True,
                 reduce_fx="sum")
        return super().training_step(batch, batch_idx)


def test_logging_reduces_over_ranks_and_only_rank_0_writes():
    logger = CountingLogger()
    trainer = make_trainer(max_epochs=1, logger=logger, log_every_n_steps=1)
    trainer.fit(LogsRank(seed=12), loader(GLOBAL_BATCH // SIZE, torch.float32))
    calls = kt.allgather_object(logger.calls)
    metrics = trainer.callback_metrics
    assert metrics["rank_mean"].item() == pytest.approx((SIZE - 1) / 2)
    steps = SAMPLES // GLOBAL_BATCH
    assert metrics["rank_sum"].item() == pytest.approx(steps * SIZE * (SIZE - 1) / 2)
    assert calls[0] > 0 and calls[1:] == [0] * (SIZE - 1), calls


# --- what it refuses -----------------------------------------------------------------------

def test_settings_that_cannot_work_are_refused_when_the_trainer_is_made():
    with pytest.raises(MisconfigurationException, match=r"devices=%d.*kolorun -np"
                       % (kt.local_size() + 1)):
        make_trainer(devices=kt.local_size() + 1)
    with pytest.raises(MisconfigurationException, match=r"num_nodes=%d.*1 host"
                       % (kt.cross_size() + 1)):
        make_trainer(num_nodes=kt.cross_size() + 1)
    with pytest.raises(MisconfigurationException, match="kolo.torch.SyncBatchNorm"):
        make_trainer(sync_batchnorm=True)
    # What kolorun decided is accepted: devices = the ranks on this host.
    assert make_trainer(devices=kt.local_size()).world_size == SIZE


@pytest.mark.skipif(kt.cuda_built(), reason="this kolo build has CUDA")
def test_gpu_placement_without_cuda_in_kolo_says_so():
    s = KoloStrategy(parallel_devices=[torch.device("cuda", 0)])
    with pytest.raises(MisconfigurationException, match="built without CUDA.*accelerator='cpu'"):
        s.set_world_ranks()


# --- pytorch_lightning ---------------------------------------------------------------------

def test_kolo_lightning_registers_with_pytorch_lightning_imported_first():
    # A fresh interpreter (no collectives): the import order users write.
    code = ("import pytorch_lightning, kolo.lightning, sys; "
            "sys.exit('kolo' not in pytorch_lightning.strategies.StrategyRegistry)")
    if RANK == 0:
        assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_pytorch_lightning_trainer_trains_with_strategy_kolo():
    import pytorch_lightning
    import kolo.lightning.pytorch_lightning as kolo_ptl

    model = mlp_class(pytorch_lightning.LightningModule)(seed=13)
    want = one_process(model, GLOBAL_BATCH)
    trainer = make_trainer(pytorch_lightning, max_epochs=1, precision="64-true")
    assert isinstance(trainer.strategy, kolo_ptl.KoloStrategy)
    assert trainer.world_size == SIZE
    trainer.fit(model, loader(GLOBAL_BATCH // SIZE))
    torch.testing.assert_close(flat(model), flat(want), rtol=0, atol=TOLERANCE)
