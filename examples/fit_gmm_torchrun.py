"""Fit a Gaussian mixture over the shards of one memory-mapped ``.npy`` file with ``torchrun``.

Every process opens the same file as a memory map and reads only its own row range (process r of W holds rows
[r N / W, (r + 1) N / W)); ``GaussianMixture.fit`` sees an initialised process group and sums the statistics of
the shards with one all-reduce per EM iteration (or per mini-batch for ``online_em`` and ``gd``), so every
process ends with the parameters the single-process fit of the whole file reaches (docs/mixture.md, "Several
processes or machines"). Rank 0 prints a JSON summary and writes the model if ``--out`` is given.

One machine, two processes:

    torchrun --standalone --nproc-per-node 2 examples/fit_gmm_torchrun.py X.npy --n-components 8

Several machines (run on each, with its own --node-rank; HOST:PORT is reachable from all of them):

    torchrun --nnodes 2 --node-rank R --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        examples/fit_gmm_torchrun.py /shared/X.npy --n-components 8

The file must be readable at the same path on every machine (a shared file system), or copied there.

With ``--checkpoint fit.ckpt`` every process writes its own checkpoint, ``fit.rank{r}of{W}.ckpt`` (and the
previous one as ``.prev``) on its own machine, every ``--checkpoint-every`` iterations (epochs); if the job dies,
running the same command again resumes where it stopped, on every process together (docs/mixture.md).
"""

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from implicit_em.mixture import GaussianMixture


def shard_rows(n_rows: int, rank: int, world: int) -> tuple[int, int]:
    """The row range [start, stop) of process ``rank`` of ``world``: contiguous, in rank order, sizes within one."""
    return n_rows * rank // world, n_rows * (rank + 1) // world


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="a 2-D float .npy file (rows x features), opened as a memory map")
    parser.add_argument("--n-components", type=int, default=8)
    parser.add_argument("--covariance-type", default="full", choices=["full", "diag", "spherical", "tied"])
    parser.add_argument("--fitter", default="em", choices=["em", "online_em", "gd"])
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=None, help="mini-batch rows (online_em, gd)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default=None, help="gloo (default on CPU) or nccl (GPUs)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per process")
    parser.add_argument("--out", default=None, help="rank 0 saves the model here (.npz or .safetensors)")
    parser.add_argument("--checkpoint", default=None, help="resumable state: each process writes PATH.rank{r}of{W}")
    parser.add_argument("--checkpoint-every", type=int, default=1, help="iterations (epochs) between checkpoints")
    args = parser.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available() and args.backend == "nccl"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(args.backend or "gloo")  # torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR...
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        x = np.load(args.data, mmap_mode="r", allow_pickle=False)
        start, stop = shard_rows(x.shape[0], rank, world)
        shard = x[start:stop]  # still a memory map: nothing is read until the fit reads it, block by block
        gm = GaussianMixture(
            args.n_components,
            covariance_type=args.covariance_type,
            fitter=args.fitter,
            max_iter=args.max_iter,
            batch_size=args.batch_size,
            random_state=args.seed,
            device="cuda" if cuda else None,
            checkpoint=args.checkpoint,
            checkpoint_every=args.checkpoint_every,
        )
        t0 = time.perf_counter()
        gm.fit(shard)
        seconds = time.perf_counter() - t0
        summary: dict[str, object] = {
            "world_size": world,
            "rows": int(x.shape[0]),
            "rows_here": stop - start,
            "fitter": args.fitter,
            "n_iter": int(gm.n_iter_),
            "converged": bool(gm.converged_),
            "lower_bound": float(gm.lower_bound_),
            "seconds": seconds,
        }
        if rank == 0:
            if args.out:
                summary["model"] = str(gm.save(args.out))
            print(json.dumps(summary), flush=True)
        dist.barrier()  # every process done before any tears its connections down (gloo aborts otherwise)
        return summary
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
