"""PyTorch's Python DDP (gloo) on dist-mnist's model, batch 32 per rank, one
thread per rank: the peer of libtorch_ddp_bench (bench/libtorch/run.sh).
Prints rank 0's mean step time.  /usr/bin/python3 torch_ddp.py [ranks] [steps]"""
import os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        x = F.dropout(x, 0.5, self.training)
        return F.log_softmax(self.fc2(x), 1)


def run(rank, world, steps, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.rand(32, 1, 28, 28), torch.randint(0, 10, (32,))
    warmup = 30
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.perf_counter()
        opt.zero_grad()
        F.nll_loss(model(x), y).backward()
        opt.step()
    ms = (time.perf_counter() - t0) * 1000 / steps
    if rank == 0:
        print(f"mode pytorch-ddp ranks {world}: {ms:.3f} ms/step", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    mp.spawn(run, args=(world, steps, 29500 + os.getpid() % 1000), nprocs=world)
