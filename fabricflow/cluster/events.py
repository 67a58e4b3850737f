"""Event kinds of the cluster simulator's heap, in the order they are handled at equal
times: repairs first (a repaired GPU is free for a job starting now), arrivals last (a
job arriving now sees every other change of this instant)."""

from __future__ import annotations

REPAIR = 0  # a failed component is back: (class, component)
FINISH = 1  # a job reaches its last step: (job, version)
RESTARTED = 2  # a job's restart is over: (job, version)
CHECKPOINTED = 3  # a proactive checkpoint is written: (job, version)
FAIL = 4  # a component fails: (class, component)
PREDICTED_FAIL = 5  # a component fails whose failure was drawn ahead: (class, component)
DRAW = 6  # draw ahead the next failure of a predicted class: (class, (time, component))
ALARM = 7  # the predictor raises an alarm: (class, (component, true failure or None))
UNDRAIN = 8  # a component drained by a false alarm is back: (class, component)
ARRIVE = 9  # a job is submitted: (job, 0)
