"""Files copied into every image. Standard library only: they run without imagekit installed."""
