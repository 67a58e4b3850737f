"""Benchmark section ``gpu``: the prepared accelerator run, in one call, within 8 minutes.

``fabricflow bench --gpu --json`` (no section named) runs this section alone. Cases, in
this order, each in its own process with its own time budget (seconds, the process's
whole life: interpreter, JAX start, setup, compile and run):

========================  ======  ===============================================================
case                      budget  what
========================  ======  ===============================================================
``maxmin_10m``            100     max-min rates of the 10,000,080-flow all-to-all on ``clos-1m``
                                  (route, first call with compile, a second call: the solve)
``cc_vmap``               45      1,000 parameter sets per rate law on the 16-to-1 incast, one
                                  vmapped call per law (section ``cc``'s batch case)
``search_16k``            75      Llama-3-405B on 16,384 H100 of ``meta-llama3-24k``, 2,048 x 8,192
                                  (search budget 50 s, then its winner's naive order)
``search_98k``            120     Llama-3-405B on 98,304 H100 of ``clos-100k``, 6,144 x 8,192
                                  (search budget 85 s)
``cluster``               120     1,000 jobs, 30 days on ``clos-100k`` (section ``cluster``'s case),
                                  stopped with its progress when its budget is spent
========================  ======  ===============================================================

The budgets sum to 460 s; a case is also cut to the time left of :data:`TOTAL_BUDGET_S`
(480 s). A search that runs out of budget stops with its counts (``exhaustive`` false),
the cluster case with the simulated day and jobs done it reached; the max-min and CC cases
are killed at their budget (``timed_out``). Per case the JSON has ``wall_s`` (the case's
process, start to end), ``device_s`` (the part on the device: the second max-min solve,
the sum of the vmapped CC calls, the search's own time, the simulation; its meaning is
in ``device_s_is``), ``cpu_s`` and ``peak_rss_bytes`` of the process (``os.wait4``, as
``/usr/bin/time -v`` reports them: host CPU, not device time) and ``cpu_reference``: the
figures of the same case measured on CPU, with the machine they come from.

Without a GPU visible to JAX the section is skipped (``skipped`` says why; exit 0).
``--quick`` runs reduced cases on whatever device JAX has (a smoke test of this script,
GPU or not): 15,360 flows on a 4,096-GPU ``clos-100k``, 10 CC sets of one law, the
Megatron 18.4B search on 256 A100 (20 s budget) and 20 jobs over one day. With
``--out FILE`` the section's figures are rewritten to ``FILE`` after every case, so a
run cut short still leaves what it measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from fabricflow.fabric.spec import load_fabric
from fabricflow.solve.cc.laws import CC_NAMES
from fabricflow.traffic.patterns import alltoall_groups

TOTAL_BUDGET_S = 480.0
#: Seconds kept back from the total: this process's own start (JAX) and the report.
RESERVE_S = 20.0
#: Case -> its budget in seconds (the process's whole life), in running order.
BUDGETS_S = {
    "maxmin_10m": 100.0,
    "cc_vmap": 45.0,
    "search_16k": 75.0,
    "search_98k": 120.0,
    "cluster": 120.0,
}
#: Search budget inside the case's own (the rest: start, fabric, the naive layout).
SEARCH_BUDGETS_S = {"search_16k": 50.0, "search_98k": 85.0}
QUICK_BUDGETS_S = {name: 120.0 for name in BUDGETS_S}

#: The same cases measured on CPU: (figures, where). Not re-measured by this section.
CPU_REFERENCE = {
    "maxmin_10m": {
        "solve_s": 52.0,
        "first_call_s": 46.0,
        "route_s": 13.9,
        "peak_rss_bytes": int(3.0e9),
        "machine": "2-core, 24 GiB development machine, CPU float32, load average 1-2",
        "source": "docs/clos-1m.md (fabricflow bench million)",
    },
    "search_16k": {
        "cpu_s": 203.0,
        "peak_rss_bytes": int(3.6 * 2**30),
        "exhaustive": True,
        "structures_solved": 349,
        "timed": 140,
        "machine": "2-core, 24 GiB development machine, quiet",
        "source": "fabricflow bench optimize, case llama3_405b_16k",
    },
    "search_98k": {
        "cpu_s": 788.0,
        "wall_s": 790.0,
        "peak_rss_bytes": int(9.4 * 2**30),
        "exhaustive": True,
        "structures_solved": 262,
        "timed": 464,
        "machine": "2-core, 24 GiB development machine, quiet",
        "source": "fabricflow bench optimize, case llama3_405b_98k",
    },
    "cluster": {
        "cpu_s": 260.0,
        "wall_s": 695.0,
        "peak_rss_bytes": int(1.2 * 2**30),
        "machine": "2-core, 24 GiB development machine, load average 5",
        "source": "fabricflow bench cluster",
    },
    "cc_vmap": None,  # not measured on CPU at 1,000 sets per law: see section cc
}

DEVICE_S_IS = {
    "maxmin_10m": "the second max-min call (solve only, new capacities, result on the host)",
    "cc_vmap": "the vmapped runs of every law, summed (compile apart)",
    "search_16k": "the search, start to answer (enumeration, bounds and solves)",
    "search_98k": "the search, start to answer (enumeration, bounds and solves)",
    "cluster": "the simulation (trace built apart)",
}


def has_gpu() -> bool:
    """Whether JAX's default backend has a GPU device."""
    import jax

    return any(device.platform == "gpu" for device in jax.devices())


def run(args) -> dict:
    import jax

    quick = bool(getattr(args, "quick", False))
    devices = jax.devices()
    result: dict = {
        "device": devices[0].device_kind,
        "platform": devices[0].platform,
        "device_count": len(devices),
        "quick": quick,
        "total_budget_s": TOTAL_BUDGET_S,
    }
    if not quick and not has_gpu():
        result["skipped"] = (
            f"no GPU visible to JAX (devices: {[str(d) for d in devices]}); install the "
            "CUDA build of JAX, or pass --quick for the reduced cases on this device"
        )
        return result
    result["cases"] = run_cases(
        list(BUDGETS_S),
        quick=quick,
        out=getattr(args, "out", None),
        drop_env=getattr(args, "case_env_drop", ()),
    )
    result["within_total_budget"] = bool(
        sum(case["wall_s"] for case in result["cases"].values()) <= TOTAL_BUDGET_S
    )
    return result


def run_cases(
    names: list[str],
    *,
    quick: bool,
    out: str | None = None,
    budgets: dict | None = None,
    drop_env: tuple = (),
) -> dict:
    """Run the cases ``names`` one after another, each in its own process cut at its
    budget (``budgets``: case -> s, default :data:`BUDGETS_S` or, quick, 120 s each) and at
    what is left of :data:`TOTAL_BUDGET_S`; rewrite ``out`` (a JSON path) after each.
    ``drop_env``: environment variables of this process the cases do not inherit."""
    budgets = budgets or (QUICK_BUDGETS_S if quick else BUDGETS_S)
    deadline = time.perf_counter() + TOTAL_BUDGET_S - RESERVE_S
    cases: dict = {}
    for name in names:
        left = deadline - time.perf_counter()
        if left <= 1.0:
            cases[name] = {"skipped": "the total budget was spent", "wall_s": 0.0}
        else:
            cases[name] = run_case(name, min(budgets[name], left), quick=quick, drop_env=drop_env)
        if out:
            with open(out, "w") as handle:
                json.dump(cases, handle, default=float)
    return cases


def run_case(name: str, budget_s: float, *, quick: bool, drop_env: tuple = ()) -> dict:
    """One case in a child process, killed (with its process group) after ``budget_s``.

    Returns the child's figures plus ``wall_s``, ``cpu_s`` and ``peak_rss_bytes`` (the
    child's, by ``os.wait4``), ``budget_s``, ``device_s_is`` and ``cpu_reference``; a
    child killed at its budget gives ``timed_out: true`` and its last progress line.
    """
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "fabricflow.bench.gpu", name, str(budget_s)]
    started = time.perf_counter()
    child = subprocess.Popen(
        command + (["--quick"] if quick else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            **{k: v for k, v in os.environ.items() if k not in drop_env},
            "PYTHONPATH": path,
        },
        start_new_session=True,  # its own process group, killed whole at the budget
    )
    streams: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    readers = [
        threading.Thread(target=_drain, args=(getattr(child, key), streams[key], key == "stderr"))
        for key in streams
    ]
    for reader in readers:
        reader.start()
    timed_out, status, usage = False, 0, None
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - started > budget_s:
            timed_out = True
            os.killpg(child.pid, signal.SIGKILL)
            _, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall_s = time.perf_counter() - started
    for reader in readers:
        reader.join()
    out: dict = {}
    if timed_out:
        lines = b"".join(streams["stderr"]).decode(errors="replace").strip().splitlines()
        out.update(timed_out=True, last_progress=lines[-1] if lines else None)
    elif child.returncode != 0:
        tail = b"".join(streams["stderr"]).decode(errors="replace").strip()[-2000:]
        out.update(error=f"the case's process exited with {child.returncode}", stderr=tail)
    else:
        out.update(json.loads(b"".join(streams["stdout"]).decode().strip().splitlines()[-1]))
    out["wall_s"] = wall_s
    out["budget_s"] = budget_s
    out["cpu_s"] = usage.ru_utime + usage.ru_stime
    out["peak_rss_bytes"] = usage.ru_maxrss * 1024  # KiB on Linux, as time -v reports it
    out["device_s_is"] = DEVICE_S_IS[name]
    out["cpu_reference"] = CPU_REFERENCE[name] or "not measured on CPU"
    return out


def _drain(stream, chunks: list, echo: bool) -> None:
    """Read ``stream`` to its end into ``chunks``; ``echo``: copy to this stderr (progress)."""
    for line in iter(stream.readline, b""):
        chunks.append(line)
        if echo:
            sys.stderr.write(line.decode(errors="replace"))
            sys.stderr.flush()


# -- the cases, each run by ``python -m fabricflow.bench.gpu CASE BUDGET_S [--quick]`` --


def maxmin_10m(budget_s: float, quick: bool) -> dict:
    """Route and solve the 10M-flow all-to-all on clos-1m (quick: 15,360 flows on 4,096
    GPUs of clos-100k); ``device_s`` is the second solve."""
    # lazy: each case runs in its own process within a time budget; it imports its case only
    from fabricflow.bench.million import GROUP_SIZE, GROUPS_FULL, solve_case

    preset, sizes = ("clos-100k", {"gpus": 4096}) if quick else ("clos-1m", {})
    started = time.perf_counter()
    fabric = load_fabric(preset, **sizes)
    out: dict = {
        "preset": preset,
        "gpus": fabric.num_gpus,
        "build_s": time.perf_counter() - started,
    }
    src, dst = alltoall_groups(fabric.num_gpus, GROUP_SIZE, 64 if quick else GROUPS_FULL)
    capacity = fabric.capacity.astype(np.float32)
    out.update(solve_case(fabric, capacity, src, dst, second_call=True))
    out["device_s"] = out["solve_s"]
    return out


def cc_vmap(budget_s: float, quick: bool) -> dict:
    """1,000 parameter sets per law in one vmapped call each (quick: 10 sets of DCQCN)."""
    # lazy: each case runs in its own process within a time budget; it imports its case only
    from fabricflow.bench.cc import _batch_case

    out: dict = {}
    laws = ("dcqcn",) if quick else CC_NAMES
    for cc in laws:
        _batch_case(cc, 10 if quick else 1000, out)
        print(f"  [cc_vmap] {cc}: {out[f'batch_{cc}_run_s']:.2f} s", file=sys.stderr, flush=True)
    out["laws"] = list(laws)
    out["device_s"] = sum(out[f"batch_{cc}_run_s"] for cc in laws)
    return out


def search(name: str, budget_s: float, quick: bool) -> dict:
    """The layout search of ``name`` with its search budget (quick: Megatron 18.4B on
    256 A100, 20 s); ``device_s`` is the search."""
    # lazy: each case runs in its own process within a time budget; it imports its case only
    from fabricflow.bench import optimize

    if quick:
        case = dict(optimize.QUICK["megatron_18b_256"])
        search_budget = 20.0
    else:
        case = dict(
            optimize.CASES["llama3_405b_16k" if name == "search_16k" else "llama3_405b_98k"]
        )
        search_budget = SEARCH_BUDGETS_S[name]
    case.pop("class_error_samples", None)
    case["target_s"] = search_budget / optimize.BUDGET_FACTOR  # search_case's budget
    out = optimize.search_case(case)
    out["search_budget_s"] = search_budget
    out["device_s"] = out["search_s"]
    return out


class _OutOfBudget(Exception):
    pass


def cluster(budget_s: float, quick: bool) -> dict:
    """The cluster section's 30-day case, stopped when ``budget_s`` (less a margin for the
    report) is spent (quick: 20 jobs over one day on dgx-h100-superpod)."""
    # lazy: each case runs in its own process within a time budget; it imports its case only
    from fabricflow.bench.cluster import run_case

    stop_at = _START + budget_s - 5.0
    reached: dict = {}

    def progress(t_s: float, done: int, total: int) -> None:
        reached.update(simulated_days=t_s / 86400.0, jobs_done=done, jobs=total)
        if time.perf_counter() > stop_at:
            raise _OutOfBudget

    began = time.perf_counter()
    try:
        if quick:
            out = run_case("dgx-h100-superpod", jobs=20, days=1.0, largest=64, spares=2,
                           progress=progress)  # fmt: skip
        else:
            out = run_case("clos-100k", jobs=1000, days=30.0, largest=16384, spares=16,
                           progress=progress)  # fmt: skip
    except _OutOfBudget:
        return {"stopped": "budget spent", **reached, "device_s": time.perf_counter() - began}
    out["device_s"] = out["simulate_s"]
    return out


_START = time.perf_counter()
_CASES = {
    "maxmin_10m": maxmin_10m,
    "cc_vmap": cc_vmap,
    "search_16k": lambda budget_s, quick: search("search_16k", budget_s, quick),
    "search_98k": lambda budget_s, quick: search("search_98k", budget_s, quick),
    "cluster": cluster,
}


if __name__ == "__main__":
    figures = _CASES[sys.argv[1]](float(sys.argv[2]), "--quick" in sys.argv[3:])
    print(json.dumps(figures, default=float))
