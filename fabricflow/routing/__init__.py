"""fabricflow.routing."""
