"""Studies: runnable experiments that reproduce the design-review figures (attachment,
oversubscription, scale-up domain, failed links, routing, congestion control, rail-only,
the DeepSeek-V3 waterfall), each with its figures in a ``*_plots`` module beside it, and
the step model's validation against published runs (:mod:`.step_validation`,
:mod:`.step_intervals`, :mod:`.step_calibration`)."""
