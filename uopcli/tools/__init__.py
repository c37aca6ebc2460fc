"""Library calls behind the commands."""
