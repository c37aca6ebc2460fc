"""File formats: uop/, the .uop file (format v1) reader and writer."""
