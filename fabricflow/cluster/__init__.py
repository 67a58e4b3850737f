"""Cluster operations: job traces, scheduling, interference and failures -> goodput.

- :mod:`.trace`: :func:`load_trace` (YAML/CSV, and the public cluster traces of
  :mod:`.public_traces`) -> :class:`LoadedTrace` of :class:`JobSpec`;
  :func:`synthetic_trace` (:mod:`.synthetic`).
- :mod:`.standalone`: a job's step time alone on the empty, healthy fabric.
- :mod:`.failures`: component failure processes, checkpoint/restart policy, Young/Daly
  and the renewal-theory goodput.
- :mod:`.simulate`: the event-driven simulator :func:`simulate_cluster` -> :class:`ClusterRun`
  (:mod:`.records`); its queue and backfill policies (:mod:`.backfill`), failure processes
  (:mod:`.failure_events`) and failure prediction (:mod:`.prediction`).
- ``state``, ``schedulers``, ``interference``: the cluster state, the placement policies
  and the joint step-time model of co-located jobs.

See docs/cluster.md.
"""

from __future__ import annotations

from fabricflow.cluster.backfill import BACKFILL
from fabricflow.cluster.failures import (
    COMPONENTS,
    DEFAULT_MTBF_S,
    DEFAULT_MTTR_S,
    CheckpointPolicy,
    FailureModel,
    best_checkpoint_interval,
    expected_goodput,
    young_daly_interval,
)
from fabricflow.cluster.interference import Interference, JobTraffic, job_traffic_shape
from fabricflow.cluster.jobspec import JobSpec, LoadedTrace, parse_duration
from fabricflow.cluster.prediction import Predictor, expected_goodput_with_prediction
from fabricflow.cluster.records import ClusterRun
from fabricflow.cluster.schedulers import SCHEDULERS, Request, Scheduler, make_scheduler
from fabricflow.cluster.simulate import simulate_cluster
from fabricflow.cluster.standalone import standalone_step
from fabricflow.cluster.state import DOWN, FREE, SPARE, ClusterState
from fabricflow.cluster.trace import load_trace, synthetic_trace

__all__ = [
    "BACKFILL",
    "Predictor",
    "expected_goodput_with_prediction",
    "COMPONENTS",
    "DOWN",
    "FREE",
    "SCHEDULERS",
    "SPARE",
    "ClusterState",
    "Interference",
    "JobTraffic",
    "Request",
    "Scheduler",
    "job_traffic_shape",
    "make_scheduler",
    "DEFAULT_MTBF_S",
    "DEFAULT_MTTR_S",
    "CheckpointPolicy",
    "ClusterRun",
    "FailureModel",
    "JobSpec",
    "LoadedTrace",
    "best_checkpoint_interval",
    "expected_goodput",
    "load_trace",
    "parse_duration",
    "simulate_cluster",
    "standalone_step",
    "synthetic_trace",
    "young_daly_interval",
]
