"""The reference for elastic_train.py: its training replayed in exact rational
arithmetic, one process, no kolo, from the sizes and restart points of a run.

What it assumes is kolo's ElasticSampler contract seen from all ranks at
once: an epoch's order is Horovod's (range(SAMPLES) shuffled with
Random(seed + epoch)); a (re)start takes the samples of that order that no
rank processed before its commit, rank r every size-th of them from r, so
step b of the (re)start sees samples [b * BATCH * size, (b + 1) * BATCH * size)
of that list.
"""
import random
from fractions import Fraction

import elastic_setup as job


def replay(segments, seed=job.SEED):
    """Final parameters (weights then bias, as Fractions) of a run made of
    `segments`: [(size, steps)], each incarnation's size and the global step
    of the commit it was restarted from (None for the last, which runs to the
    end). Steps past a restart point are the ones a restart discards."""
    lr, momentum = Fraction(job.LR), Fraction(job.MOMENTUM)
    data = [[Fraction(v) for v in job.features(i)] for i in range(job.SAMPLES)]
    weight = [Fraction(0)] * job.FEATURES
    bias = Fraction(0)
    buf_w, buf_b = None, None
    epoch, step, processed = 0, 0, set()
    for size, stop in segments:
        while epoch < job.EPOCHS and (stop is None or step < stop):
            order = list(range(job.SAMPLES))
            random.Random(seed + epoch).shuffle(order)
            remaining = [i for i in order if i not in processed]
            assert len(remaining) % (size * job.BATCH) == 0, "the test's sizes must divide evenly"
            per_step = size * job.BATCH
            for b in range(len(remaining) // per_step):
                batch = remaining[b * per_step:(b + 1) * per_step]
                grad_w = [sum(data[i][j] for i in batch) / size for j in range(job.FEATURES)]
                grad_b = Fraction(job.BATCH)
                if buf_w is None:
                    buf_w, buf_b = grad_w, grad_b
                else:
                    buf_w = [momentum * m + g for m, g in zip(buf_w, grad_w)]
                    buf_b = momentum * buf_b + grad_b
                weight = [w - lr * m for w, m in zip(weight, buf_w)]
                bias = bias - lr * buf_b
                processed.update(batch)
                step += 1
                if stop is not None and step == stop:
                    break
            else:
                epoch += 1
                processed = set()
    return weight + [bias]


def as_float64(values):
    """The Fractions as float64, checking that each is exactly representable."""
    out = []
    for v in values:
        f = float(v)
        assert Fraction(f) == v, f"{v} is not exact in float64: the reference would round"
        out.append(f)
    return out
