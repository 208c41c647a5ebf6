"""voxflow adapters."""
