"""annotation package."""
