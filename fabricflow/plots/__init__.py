"""Figures of the planner's results (matplotlib, no pyplot state): fabrics, rates,
collectives, step breakdowns, layout searches, the routing optimizer, congestion control
and cluster runs. :mod:`.figures` makes and saves every figure. Studies keep their own
figures in :mod:`fabricflow.study`."""
