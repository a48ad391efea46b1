"""What is true of the world, read from imagekit/data: the compatibility table, the GPU table and the facts
generated into the probe, and where a platform runs natively or emulated."""
