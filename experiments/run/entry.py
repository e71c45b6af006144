"""The `passk` console script: says in one line which extra to install when the training stack is missing.

The core install (`pip install passk`) carries only `sandbox` and `rewards`; every `passk` command trains or
evaluates a model and needs the `train` extra. The extra's packages are read from passk's installed metadata,
so pyproject.toml stays their one home. Nothing heavy is imported here.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from importlib import metadata

EXTRA = "train"
INSTALL = f'pip install "passk[{EXTRA}]"'


def missing_extra_packages(extra: str = EXTRA) -> list[str]:
    """The distributions of passk's ``extra`` that are not installed (none if passk's metadata is absent)."""
    try:
        requires = metadata.requires("passk") or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requires:  # e.g. 'trl==1.16.*; extra == "train"'
        if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", requirement.partition(";")[2]):
            name = re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0)
            try:
                metadata.distribution(name)
            except metadata.PackageNotFoundError:
                missing.append(name)
    return missing


def main(argv: Sequence[str] | None = None) -> int:
    """Run `experiments.run.cli.main`, or print one line naming the extra and return 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    missing = missing_extra_packages()
    if missing:
        command = f"passk {args[0]}" if args and not args[0].startswith("-") else "passk"
        print(
            f"{command}: needs the training extra, {INSTALL} (missing: {', '.join(missing)}); "
            "the core install offers `python -m sandbox` and the `rewards` package",
            file=sys.stderr,
        )
        return 2
    from experiments.run.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
