"""world_model."""
