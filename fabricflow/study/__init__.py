"""fabricflow.study."""
