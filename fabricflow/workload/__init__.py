"""fabricflow.workload."""
