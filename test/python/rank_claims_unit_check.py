"""The rank claims of kolo.common.launch_checks as a protocol, in one process: threads play
the processes of a job over an in-memory store with torch.distributed's semantics
(compare_set, add, wait, get, check, set), so the outcomes are checked without torch or
sockets. The processes themselves, on two hosts, are in test/c10d/rank_claims_check.py.

A pytest file run directly (see separate_copies_check.py); PYTHONPATH has the package.
"""
import threading
import time

import pytest

from kolo.common import launch_checks


class MemoryStore:
    """torch.distributed's Store semantics, in memory, for threads."""

    def __init__(self):
        self.values, self.cv = {}, threading.Condition()

    def compare_set(self, key, expected, desired):
        with self.cv:
            current = self.values.get(key)
            if current is None and expected == "" or current == expected.encode():
                self.values[key] = desired.encode()
                self.cv.notify_all()
            return self.values.get(key, expected.encode())

    def add(self, key, amount):
        with self.cv:
            value = int(self.values.get(key, b"0")) + amount
            self.values[key] = str(value).encode()
            self.cv.notify_all()
            return value

    def set(self, key, value):
        with self.cv:
            self.values[key] = value.encode()
            self.cv.notify_all()

    def get(self, key):
        with self.cv:
            return self.values[key]

    def check(self, keys):
        with self.cv:
            return all(k in self.values for k in keys)

    def wait(self, keys, timeout):
        with self.cv:
            if not self.cv.wait_for(lambda: all(k in self.values for k in keys),
                                    timeout.total_seconds()):
                raise RuntimeError("Wait timeout")


def claim_all(claims, seconds=10.0):
    """Each (rank, size) claims in one store from a thread of its own; the outcome of each:
    None, or the error's text."""
    store, outcomes = MemoryStore(), [None] * len(claims)
    deadline = time.monotonic() + seconds

    def one(i, rank, size):
        try:
            launch_checks.claim_ranks(store, rank, size, seconds, deadline,
                                      lambda what: RuntimeError("join failed: " + what))
        except RuntimeError as e:
            outcomes[i] = str(e)

    threads = [threading.Thread(target=one, args=(i,) + c) for i, c in enumerate(claims)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 10)
    assert not any(t.is_alive() for t in threads), "a claim did not end"
    return outcomes


def test_distinct_ranks_of_one_size_pass():
    assert claim_all([(r, 4) for r in (2, 0, 3, 1)]) == [None] * 4


def test_a_duplicate_rank_fails_every_process_with_one_message():
    outcomes = claim_all([(0, 2), (0, 2)])
    assert len(set(outcomes)) == 1, outcomes
    assert outcomes[0].startswith("kolo: rank 0 of this torch.distributed job is claimed by "
                                  "two processes: pid "), outcomes[0]


def test_disagreeing_world_sizes_fail_every_process():
    outcomes = claim_all([(0, 2), (1, 3)])
    assert len(set(outcomes)) == 1 and "disagree on its size" in outcomes[0], outcomes


def test_a_rank_outside_the_world_size_fails_every_process():
    outcomes = claim_all([(0, 2), (2, 2)])
    assert len(set(outcomes)) == 1 and "was given rank 2, outside the world size 2" in (
        outcomes[0]), outcomes


@pytest.mark.parametrize("present", [[1], [0]])
def test_a_rank_that_never_comes_is_named_at_the_timeout(present):
    [outcome] = claim_all([(r, 2) for r in present], seconds=0.5)
    missing = 1 - present[0]
    assert outcome.startswith("join failed: rank(s) %d never called init_process_group"
                              % missing), outcome
    # Only a missing rank 0 holds an env:// start's store, waiting for a larger world size.
    assert ("is its world size larger than 2?" in outcome) == (missing == 0), outcome
