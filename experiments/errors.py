"""The errors a user can fix, in one place: each message is one line that says what is wrong and what to do.

`passk` and `python -m experiments.train` print a `USER_ERRORS` exception as `passk: error: <message>` and exit
with status 2 instead of a traceback. The modules that raise them (config, data, models, budget, the CLI) import
them from here, so that no module imports another only to learn its error class.
"""

from __future__ import annotations

__all__ = ["USER_ERRORS", "CliError", "ConfigError", "DataError", "ModelError"]


class ConfigError(ValueError):
    """A configuration that cannot run. The message is one line and names the offending key."""


class DataError(ValueError):
    """A dataset that cannot be used; the message is one line that says why and what to do."""


class ModelError(RuntimeError):
    """A model that cannot be built or found; the message is one line that says what was tried."""


class CliError(RuntimeError):
    """A usage error of the `passk` command; printed as one line."""


# Bad input the user can fix, reported by the command line in one line rather than as a traceback.
USER_ERRORS: tuple[type[Exception], ...] = (ConfigError, DataError, ModelError, CliError)
