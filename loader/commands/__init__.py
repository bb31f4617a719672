"""CLI commands that live in their own modules; registered in loader/cli.py."""
