"""voxflow voice pipeline."""
