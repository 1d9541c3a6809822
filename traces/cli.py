"""What every CLI of the package shares: `ArgumentParser` (usage errors raise `CLIError`) and `cli_main`
(parse, check, run; bad input -> one ``error: ...`` line on stderr and exit status 2)."""
from __future__ import annotations

import argparse
import sys

__all__ = ["CLIError", "ArgumentParser", "cli_main"]


class CLIError(ValueError):
    """Bad command-line input (reported as one ``error: ...`` line, exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise `CLIError` instead of printing usage and exiting."""

    def error(self, message):  # noqa: D401 - argparse API
        raise CLIError(message)


def cli_main(create_parser, check_arguments, run, argv=None) -> int:
    """Parse, check and run; bad input -> one ``error: ...`` line on stderr and exit status 2."""
    parser = create_parser()

    def error(message):                # argparse's own errors: one line too, not the usage block
        raise ValueError(f"{message} (--help explains the arguments)")

    parser.error = error
    try:
        args = parser.parse_args(argv)
        check_arguments(args)
        return run(args)
    except SystemExit as exc:          # --help / --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, OSError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
