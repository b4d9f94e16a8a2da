"""Command-line tools of the repository (the tests import them as `scripts.<module>`)."""
