"""kolo.torch.init(comm=...) with an mpi4py sub-communicator (run under kolorun -np 4):
each half of the ranks gets its own kolo job."""
from mpi4py import MPI
import torch

import kolo.torch as hvd

world = MPI.COMM_WORLD
half = world.Split(color=world.rank % 2, key=world.rank)
hvd.init(comm=half)
assert hvd.size() == half.size == world.size // 2, (hvd.size(), half.size)
assert hvd.rank() == half.rank
total = hvd.allreduce(torch.tensor([float(world.rank)]), op=hvd.Sum)
want = sum(r for r in range(world.size) if r % 2 == world.rank % 2)
assert total.item() == want, (total.item(), want)
hvd.shutdown()
world.Barrier()  # MPI stays usable: mpi4py owns it
print("comm split: OK rank", world.rank, "sum", total.item())
