"""voxflow."""
