"""Developer tools that work on a source checkout (not needed at run time)."""
