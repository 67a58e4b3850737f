"""fabricflow.fabric."""
