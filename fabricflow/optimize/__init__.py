"""fabricflow.optimize."""
