"""Congestion control as a family: one fluid integrator, many rate laws (arrays only).

* :mod:`.integrator`: the jitted integrator of queues, ECN marking, delay and INT
  signals, feedback delays and PFC pause/resume (bounded ``lax.scan``, status, vmap over
  parameter sets and capacity scenarios).
* :mod:`.law`: the interface of a rate law (``init``, ``update`` from delayed feedback,
  ``max_stable_dt``; parameters with sourced presets) and the :class:`~.law.Feedback` it
  reads.
* One file per algorithm: :mod:`.dcqcn`, :mod:`.hpcc`, :mod:`.timely`, :mod:`.swift`,
  :mod:`.predictive`; :mod:`.laws` is the registry (``LAWS``, ``resolve_law``).
* :mod:`.prepare` (host-side checks and layout: ``prepare_cc``), :mod:`.run_cc`
  (``run_cc``), :mod:`.result` (``CCResult``), :mod:`.work` (work estimates and limits).
* Analysis: :mod:`.dcqcn_analysis` (DCQCN fixed point, linear stability),
  :mod:`.fixed_points` (the analytic steady states of the other laws).

The fabric-level entry point is :func:`fabricflow.simulate_cc`. Importing this package
loads nothing; import the module you need.
"""
