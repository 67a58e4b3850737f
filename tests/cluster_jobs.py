"""A job alone on a small cluster with GPU failures and spares: the setting in which the
simulator follows renewal theory exactly (tests of checkpoints and failure prediction)."""

from __future__ import annotations

import fabricflow as ff
from fabricflow.cluster.failures import CheckpointPolicy, FailureModel
from fabricflow.cluster.simulate import simulate_cluster

SOLO = {
    "id": "solo",
    "model": "llama3-8b",
    "gpu": "h100-sxm",
    "gpus": 128,
    "layout": {"tp": 8, "micro_batch": 1, "seq": 8192},
}


def solo_run(interval, write, restart, mtbf, steps, seed, prediction=None, duration_s=None):
    """One 128-GPU job on dgx-h100-superpod cut to 256 GPUs: only GPU failures (the job's
    MTBF is ``mtbf``), 10-minute repairs, 4 spare nodes and 12 idle ones to move to. Its
    length: ``steps``, or ``duration_s`` seconds of standalone work (then ``steps`` is
    None: a count of failures that does not move with the step model)."""
    length = {"steps": steps} if duration_s is None else {"duration": duration_s}
    fabric = ff.load_fabric("dgx-h100-superpod", gpus=256)
    model = FailureModel({"gpu": mtbf * 128}, mttr_s={"gpu": 600})
    policy = CheckpointPolicy(interval_s=interval, write_s=write, restart_s=restart, spares=4)
    return simulate_cluster(
        fabric,
        [{**SOLO, **length}],
        scheduler="first-fit",
        interference=False,
        failures=model,
        checkpoint=policy,
        prediction=prediction,
        seed=seed,
    )
