"""The entry points: :func:`main` (click, one-line errors, the exit codes) and :func:`entry` (the console script)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from ._common import EXIT_INTERRUPTED, EXIT_TERMINATED, _INVOKED, _fail
from ._group import cli


def main(argv: list[str] | None = None) -> None:
    """Entry point: click in non-standalone mode so usage errors are one line with exit code 2."""
    _INVOKED[:] = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=argv, prog_name="mlflow-perfgate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's word for Ctrl-C
            click.echo("Error: interrupted (Ctrl-C): every run it had started was ended (what was measured written, "
                       "the attempts cut short withdrawn, the comparison or suite run KILLED)", err=True)
            sys.exit(EXIT_INTERRUPTED)
        _fail("aborted")
    except click.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "))
    except BaseException as exc:
        if type(exc).__name__ != "Terminated":  # harness.Terminated: SIGTERM reached a comparison
            raise
        click.echo(f"Error: stopped, {exc}: every run it had started was ended (what was measured written, the "
                   "attempts cut short withdrawn, the comparison or suite run KILLED)", err=True)
        sys.exit(EXIT_TERMINATED)
    sys.exit(0)


def entry() -> NoReturn:
    """The console script's entry, and ``python -m mlflow_perfgate``'s: :func:`main`, then a quick end.

    A comparison leaves about 3,000 modules imported (mlflow, SQLAlchemy, scipy, matplotlib), and
    the interpreter's teardown of them took about a second on a 2-core machine, after everything
    was written. So when :func:`main` has returned its exit status and no other thread that the
    interpreter would wait for is alive, the exit handlers run here (MLflow's, the temporary
    directories', an attempt runner's), the streams are flushed, and the process ends without
    that teardown. Anything else (another thread alive, an uncaught error) ends as Python does.
    """
    import atexit
    import threading

    try:
        main()
        status = 0
    except SystemExit as exc:
        status = exc.code
    if any(thread is not threading.main_thread() and thread.is_alive() and not thread.daemon
           for thread in threading.enumerate()):
        sys.exit(status)
    if status is None:
        status = 0
    elif not isinstance(status, int):  # sys.exit("message"): the message on stderr, status 1
        print(status, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: Python's own exit says 120 then
            status = status or 120
    os._exit(status)
