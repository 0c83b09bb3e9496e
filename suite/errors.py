"""The one exception type for bad input from the user."""


class SuiteError(Exception):
    """Bad input from the user: reported as one line on stderr, exit code 2."""
