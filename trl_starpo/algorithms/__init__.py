"""Pure tensor functions: advantages, filters and critics. No trainer state."""
