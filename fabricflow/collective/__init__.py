"""fabricflow.collective."""
