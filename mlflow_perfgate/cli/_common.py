"""How every command answers: exit codes, one-line errors, the store checks, the printed decision."""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from typing import NoReturn

import click


#: Exit codes of the gate (docs/design.md).
EXIT_CODES = {"accept": 0, "reject": 1, "rerun": 3, "blocked_by_correctness": 4}
EXIT_USAGE = 2
#: A comparison stopped by SIGTERM (a cancelled CI job): 128 + 15, as a shell reports it.
EXIT_TERMINATED = 143
#: A command stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports it (never 2, a usage error's code).
EXIT_INTERRUPTED = 130
_DEBUG_ENV = "MLFLOW_PERFGATE_DEBUG"


def _fail(message: str) -> NoReturn:
    from mlflow_perfgate.tracking import redact_text  # no mlflow: passwords and tokens never printed

    click.echo(f"Error: {redact_text(message)}", err=True)
    sys.exit(EXIT_USAGE)


def _one_line(exc: BaseException) -> str:
    from mlflow_perfgate.tracking import fit  # no mlflow

    message = getattr(exc, "message", None) or str(exc)
    text = " ".join(str(message).split())
    return fit(text, 2000)  # the one marker of a cut text of ours (tracking/_schema.fit)


def _check_store_uri(writes: bool = True) -> None:
    """A misspelled store scheme in ``MLFLOW_TRACKING_URI`` (``sqllite:///mlflow.db``) is one line
    at once, before MLflow is imported; so is a local store a command that writes cannot write."""
    from mlflow_perfgate.tracking import require_writable_store, scheme_problem

    uri = os.environ.get("MLFLOW_TRACKING_URI")
    problem = scheme_problem(uri)
    if problem:
        _fail(problem)
    if writes:
        require_writable_store(uri or _DEFAULT_STORE)


#: MLflow's default tracking store, where ``MLFLOW_TRACKING_URI`` names none.
_DEFAULT_STORE = "sqlite:///mlflow.db"


def only_reads(func):
    """A command that writes nothing to the store (``decisions``, ``report``): a read-only store serves it."""
    func._perfgate_only_reads = True
    return func


def reads_only(func):
    """A command that works on what the store holds (it judges, lists, reports or marks runs already
    there): a local store that does not exist is refused in one line (exit 2), never created (nor
    its folder, nor an experiment). Inside :func:`guarded`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from mlflow_perfgate.tracking import ensure_reachable, read_only

        # A dead or silent server is one line before MLflow's import; what the probe found is
        # remembered, so the client does not ask again.
        ensure_reachable(os.environ.get("MLFLOW_TRACKING_URI") or "")
        with read_only():  # checked by the client, after the command's own input (the URI MLflow resolves)
            return func(*args, **kwargs)

    return wrapper


def guarded(func):
    """Print what the user can fix in one line (exit 2); show anything else as the bug it is.

    A :class:`~mlflow_perfgate.errors.PerfgateError` (bad input, a broken single-variable rule,
    differing environments, a store that refused or could not be reached) and an ``OSError``
    (a file that cannot be read or written) are one line on stderr. Any other exception is a
    bug: its traceback is printed, with a request to report it, and the exit code is 2 too.
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from mlflow_perfgate.errors import PerfgateError

        try:
            _check_store_uri(writes=not getattr(func, "_perfgate_only_reads", False))
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except (PerfgateError, OSError) as exc:
            if os.environ.get(_DEBUG_ENV):
                raise
            _fail(_one_line(exc))
        except Exception as exc:
            if os.environ.get(_DEBUG_ENV):
                raise
            from mlflow_perfgate.tracking import redact_text

            click.echo(redact_text(traceback.format_exc()).rstrip("\n"), err=True)
            _fail(f"internal error, a bug in mlflow-perfgate ({type(exc).__name__}: {_one_line(exc)}); "
                  "please report it with the traceback above")

    return wrapper


def parse_assignments(items: tuple[str, ...], option: str, *, allow_empty: bool = True) -> dict[str, str]:
    """``("a=1", "b=x")`` -> ``{"a": "1", "b": "x"}``, with a clear error for a bad item.

    With ``allow_empty=False`` a ``KEY=`` with nothing after it is refused: on a command line it is
    most often a shell variable that was not set (``--set revision=$GIT_SHA``).
    """
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        key = key.strip()
        if key in result:
            raise click.BadParameter(f"{key!r} given twice", param_hint=option)
        if not value.strip() and not allow_empty:
            raise click.BadParameter(f"{key!r} has an empty value (an unset shell variable?); give a value, or "
                                     "--allow-empty to record it empty", param_hint=option)
        result[key] = value.strip()
    return result


def print_decision(result: dict, output_format: str, gate: bool = True) -> None:
    """The report (or the JSON result); for the text format, then the tail: what happened and where to look.

    ``gate=False`` (``pipeline`` without ``--gate``, which exits 0 whatever the decision) says the code
    the decision would give as a gate rather than calling it this command's exit code.
    """
    if output_format == "json":
        click.echo(json.dumps(result, indent=2, default=str))
        return
    from mlflow_perfgate.tracking import decision_markdown, decision_summary

    click.echo(result.get("report") or decision_markdown(result))
    click.echo(f"decision run: {result['decision_run_id']}")
    tail = decision_summary(result, ["mlflow-perfgate", *_INVOKED])
    code = EXIT_CODES[result["decision"]]
    tail[0] += f" (exit code {code})" if gate else f" (as a gate, exit code {code}; this command exits 0: --gate)"
    click.echo("\n".join(["", *tail]))


def exit_for(result: dict) -> None:
    """Exit with the decision's code; a result without a logged decision run never exits 0 (accept)."""
    if not result.get("decision_run_id"):
        _fail(f"no decision run was logged (decision {result.get('decision')!r}); nothing was accepted")
    sys.exit(EXIT_CODES[result["decision"]])


def exit_for_suite(summary: dict) -> None:
    """Exit with the suite decision's code; a suite decision not written onto a suite run never exits 0."""
    if not summary.get("suite_run_id"):
        _fail(f"no suite decision was logged (decision {summary.get('decision')!r}); nothing was accepted")
    sys.exit(EXIT_CODES[summary["decision"]])


def _until_decided(run, what: str, *args, **kwargs):
    """Call ``run``; a ``SystemExit`` from the code it ran (a workload's ``sys.exit``) is an error, never exit 0.

    A comparison or a pipeline ends in this process with an exit code only after a decision
    run is logged (:func:`exit_for`); whatever exits before that is reported in one line (exit 2).
    """
    try:
        return run(*args, **kwargs)
    except SystemExit as exc:
        _fail(f"{what} stopped before a decision was logged: sys.exit({exc.code!r}) was called by the code it ran "
              "(the workload?); nothing was accepted")


def _conditions(sets: tuple[str, ...], allow_empty: bool = False) -> dict:
    return parse_assignments(sets, "--set", allow_empty=allow_empty)


#: The arguments of this process's command, as typed (a rerun's next step repeats them).
_INVOKED: list[str] = []
