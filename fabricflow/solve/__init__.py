"""fabricflow.solve."""
