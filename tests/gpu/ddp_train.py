"""ddp_train.py — DDP training of a small transformer under torchrun with NCCL, for the
multi-GPU issue. Each rank writes its per-step losses to $DDP_OUT/losses.<mode>.<rank>.json.
With DDP_RELEASE_AT=N every rank sends itself SIGUSR1 at step N (training goes on) and records
device memory just before and 1 s after.
Run: torchrun --nproc_per_node=2 tests/gpu/ddp_train.py   (see scripts/gpu-check-multi)"""
import json
import os
import signal
import time

import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpucommon import runtime_meminfo  # noqa: E402 (the shim's cudaMemGetInfo counts its cache as free)

STEPS = int(os.environ.get("DDP_STEPS", "300"))
RELEASE_AT = int(os.environ.get("DDP_RELEASE_AT", "150"))


def main():
    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    losses, mem, t0 = [], {}, time.perf_counter()
    for step in range(STEPS):
        x = torch.randn(8, 256, 512, device="cuda", generator=gen)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == RELEASE_AT and "LD_PRELOAD" in os.environ:
            real_free = runtime_meminfo()
            mem["before_free"] = real_free()
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(1.0)
            mem["after_free"] = real_free()
    torch.cuda.synchronize()
    mode = os.environ.get("DDP_MODE", "plain")
    out = os.environ.get("DDP_OUT", "/tmp")
    with open(os.path.join(out, f"losses.{mode}.{rank}.json"), "w") as f:
        json.dump({"losses": losses, "step_ms": (time.perf_counter() - t0) * 1000 / STEPS,
                   "mem": mem}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
