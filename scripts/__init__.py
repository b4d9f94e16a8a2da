"""Command-line tools shipped with the repository (importable by the tests as `scripts.<module>`)."""
