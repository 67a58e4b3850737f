"""Jobs that span GPU types: each pipeline stage runs on one type, in the given order.

A job such as ``"h100-sxm:1024,h20:1024"`` puts the first 1024 GPUs' pipeline stages on
H100 and the rest on H20. Each type must get whole pipeline stages (a stage is
``tp x cp x dp`` GPUs). Unless the layout fixes ``pp_split``, layers are dealt to the
stages in proportion to each stage's speed: the integer split that minimises the slowest
stage's compute time per micro-batch (embedding and head included, on their own stage's
GPU). The step model then times every stage on its own GPU type and the slowest one sets
the pace; memory is checked per stage against its own GPU's HBM.

Example::

    gpus = job_gpus("h100-sxm:1024,h20:1024", layout)   # one GpuSpec per pipeline rank
    layout = split_for_gpus(model, layout, gpus)         # pp_split set from the speeds
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Mapping, Sequence

import numpy as np

from fabricflow import schema
from fabricflow.errors import SpecError
from fabricflow.files import read_structured
from fabricflow.workload.gpu import GpuSpec, load_gpu
from fabricflow.workload.layer_cost import embedding_cost, head_cost, layer_cost
from fabricflow.workload.layout import Layout
from fabricflow.workload.model_spec import ModelSpec

_ITEM = re.compile(r"\s*([^:,\s]+)\s*:\s*([^,]*?)\s*")


def parse_gpu_mix(text: str, field: str = "gpu") -> list[tuple[str, int]]:
    """``"h100-sxm:1024,h20:1024"`` -> ``[("h100-sxm", 1024), ("h20", 1024)]``.

    Counts are decimal integers >= 1; a type may appear once. Errors name ``field``.
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, f"expected TYPE:COUNT[,TYPE:COUNT...], got {text!r}")
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if not match or not re.fullmatch(r"[0-9]+", match.group(2)):
            raise SpecError(
                field, f"cannot read {item.strip()!r}: expected TYPE:COUNT, e.g. h100-sxm:1024"
            )
        out.append((match.group(1), int(match.group(2))))
    return _checked(out, field)


def _checked(mix: list[tuple], field: str) -> list:
    names = [spec.name if isinstance(spec, GpuSpec) else str(spec) for spec, _ in mix]
    for (_, count), name in zip(mix, names, strict=True):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
            raise SpecError(field, f"{name}: the count must be an integer >= 1, got {count!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SpecError(field, f"GPU type {repeated[0]!r} given twice; give each type once")
    return [(spec, int(count)) for spec, count in mix]


def load_job(path: str) -> dict:
    """A YAML (or JSON) job spec: ``gpus``, a list in pipeline order of ``{gpu: NAME or
    GPU spec mapping, count: N}``, and an optional ``pp_split`` (layers per rank).

    Returns ``{"gpus": [(GpuSpec, count), ...], "pp_split": tuple | None}``.

    Example (``job.yaml``)::

        gpus:
          - {gpu: h100-sxm, count: 1024}
          - {gpu: h20, count: 1024}
    """
    data = read_structured(path, what="job")
    if not isinstance(data, dict):
        raise SpecError("job", f"{path}: expected a mapping with 'gpus', got {type(data).__name__}")
    job = schema.Section(data, "job", ("gpus", "pp_split"))
    entries = job.raw("gpus", None)
    if not isinstance(entries, list) or not entries:
        raise SpecError("job.gpus", "must be a non-empty list of {gpu: NAME, count: N}")
    mix = []
    for index, entry in enumerate(entries):
        where = f"job.gpus[{index}]"
        if not isinstance(entry, dict):
            raise SpecError(where, f"expected {{gpu: NAME, count: N}}, got {entry!r:.60}")
        item = schema.Section(entry, where, ("gpu", "count"))
        mix.append((load_gpu(item.raw("gpu")), item.raw("count")))
    split = job.raw("pp_split", None)
    if split is not None and not isinstance(split, list):
        raise SpecError("job.pp_split", f"must be a list of layers per rank, got {split!r}")
    return {
        "gpus": _checked(mix, "job.gpus"),
        "pp_split": None if split is None else tuple(split),
    }


def job_gpus(gpu, layout: Layout, field: str = "gpu") -> tuple[GpuSpec, ...]:
    """The GPU of every pipeline rank, first to last (length ``layout.pp``).

    ``gpu``: a :class:`GpuSpec` or preset name (every rank), a mix ``"a:n,b:m"``, a
    sequence of ``(GpuSpec | name, count)`` or a mapping ``{name: count}``, in pipeline
    order. Counts must sum to ``layout.num_gpus`` and be whole stages of
    ``num_gpus / pp`` GPUs; otherwise :class:`SpecError` names ``field`` and the nearest
    valid split.
    """
    if isinstance(gpu, GpuSpec):
        return (gpu,) * layout.pp
    if isinstance(gpu, str):
        if ":" not in gpu and "," not in gpu:
            return (load_gpu(gpu),) * layout.pp
        mix: list = parse_gpu_mix(gpu, field)
    elif isinstance(gpu, Mapping):
        mix = _checked(list(gpu.items()), field)
    elif isinstance(gpu, Sequence) and all(
        isinstance(item, (tuple, list)) and len(item) == 2 for item in gpu
    ):
        mix = _checked([tuple(item) for item in gpu], field)
    else:
        raise SpecError(
            field,
            "expected a GPU preset name, a GpuSpec, 'a:n,b:m' or a list of (GPU, count), "
            f"got {type(gpu).__name__}",
        )
    specs = [spec if isinstance(spec, GpuSpec) else load_gpu(spec) for spec, _ in mix]
    counts = [count for _, count in mix]
    per_stage = layout.num_gpus // layout.pp
    names = [spec.name for spec in specs]
    if sum(counts) != layout.num_gpus or any(count % per_stage for count in counts):
        nearest = _nearest_stages(counts, per_stage, layout.pp)
        hint = (
            "nearest valid split: "
            + ",".join(f"{n}:{k * per_stage}" for n, k in zip(names, nearest, strict=True))
            if min(nearest) >= 1
            else f"pp={layout.pp} has too few stages for {len(counts)} GPU types"
        )
        raise SpecError(
            field,
            f"{','.join(f'{n}:{c}' for n, c in zip(names, counts, strict=True))} must give "
            f"each type whole pipeline stages of tp x cp x dp = {per_stage} GPUs summing to "
            f"the layout's {layout.num_gpus} GPUs; {hint}",
        )
    stages = [count // per_stage for count in counts]
    return tuple(spec for spec, k in zip(specs, stages, strict=True) for _ in range(k))


def _nearest_stages(counts: list[int], per_stage: int, pp: int) -> list[int]:
    """Whole stages per type, summing to ``pp``, closest to ``counts`` in proportion
    (largest remainders)."""
    wanted = np.asarray(counts, dtype=float) / max(sum(counts), 1) * pp
    stages = np.floor(wanted).astype(int)
    order = np.argsort(-(wanted - stages), kind="stable")
    stages[order[: pp - int(stages.sum())]] += 1
    return [int(k) for k in stages]


def is_mixed(gpus: Sequence[GpuSpec]) -> bool:
    """True when the ranks' GPUs differ in any field other than the name."""
    first = dataclasses.replace(gpus[0], name="")
    return any(dataclasses.replace(g, name="") != first for g in gpus[1:])


def split_for_gpus(model: ModelSpec, layout: Layout, gpus: Sequence[GpuSpec]) -> Layout:
    """``layout`` with ``pp_split`` set in proportion to each rank's GPU speed.

    Unchanged when ``pp_split`` is given or every rank has the same GPU (the
    :meth:`Layout.rank_layers` rule then applies). Otherwise rank ``r`` costs ``c_r`` per
    layer (dense/MoE mix, forward + backward + recompute) plus its embedding or head
    ``e_r``; the split minimises ``max_r (n_r c_r + e_r)`` with ``sum n_r = L`` and
    ``n_r >= 1`` on middle ranks. Greedy is exact here (each rank's cost grows by a constant
    per layer): the ``L`` smallest of the candidate times ``e_r + k c_r`` over ranks and
    ``k >= 1``, counted per rank. Interleaved and DualPipe schedules are refused (their
    ranks hold several stages; give ``pp_split``).
    """
    if layout.pp_split is not None or not is_mixed(gpus):
        return layout
    if layout.schedule != "1f1b":
        raise SpecError(
            "layout.pipeline_schedule",
            f"a job on several GPU types splits layers by speed under 1F1B only, not "
            f"{layout.schedule}; give pp_split to run it",
        )
    p, layers = layout.pp, model.num_layers
    if layers < max(p - 2, 1):
        raise SpecError("layout.pp", f"{layers} layers cannot fill the {p} - 2 middle stages")
    per_layer = np.empty(p)
    extra = np.zeros(p)
    cache: dict = {}
    for rank, gpu in enumerate(gpus):
        if gpu not in cache:
            cache[gpu] = _layer_seconds(model, gpu, layout)
        per_layer[rank] = cache[gpu]
    extra[0] += sum(embedding_cost(model, gpus[0], layout))
    extra[-1] += sum(head_cost(model, gpus[-1], layout))
    candidates = extra[:, None] + per_layer[:, None] * np.arange(1, layers + 1)[None, :]
    if p > 2:
        candidates[1:-1, 0] = -np.inf  # every middle rank holds at least one layer
    # stable sort: on equal times the lower rank index takes the layer first
    chosen = np.argsort(candidates.ravel(), kind="stable")[:layers]
    split = np.bincount(chosen // layers, minlength=p)
    return dataclasses.replace(layout, pp_split=tuple(int(n) for n in split))


def _layer_seconds(model: ModelSpec, gpu: GpuSpec, layout: Layout) -> float:
    """Compute seconds of one average layer (dense/MoE mix) per micro-batch on ``gpu``."""
    total = layer_cost(model, gpu, layout, moe=False).total_s * (
        model.num_dense_layers / model.num_layers
    )
    if model.is_moe:
        total += layer_cost(model, gpu, layout, moe=True).total_s * (
            model.num_moe_layers / model.num_layers
        )
    return total / layout.framework_efficiency
