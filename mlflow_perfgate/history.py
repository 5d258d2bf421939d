"""History over revisions: read a benchmark's series (``tracking``), and bisect a regression with comparisons.

The application layer beside :mod:`mlflow_perfgate.harness`. :func:`bisect` narrows a regression
between a good and a bad revision of the git repository in the working directory to one commit:
each step compares a revision (``revision`` condition, the candidate) against the good one (the
baseline) with :func:`~mlflow_perfgate.harness.compare` in non-regression mode, in a git
worktree of each revision, and :func:`mlflow_perfgate.rules.bisect_next` picks the next
revision, reusing every decision recorded before (a group per pair of revisions, named
``bisect/<benchmark>/<good>..<revision>``).

Each comparison runs lockstep rounds (:mod:`mlflow_perfgate.sites`): each revision's children
start in its worktree, so ``--workload bench:make`` imports each revision's own ``bench.py``. A
workload kept outside the repository finds a revision's code through :func:`revision_worktree`:
``bisect`` checks out each revision it judges under one folder (named by
``$MLFLOW_PERFGATE_WORKTREES`` in the children) and the workload reads its ``revision``
condition to find it::

    from mlflow_perfgate.history import revision_worktree

    def make(conditions):                      # --workload mybench:make
        root = revision_worktree(conditions)   # the checkout of conditions["revision"]
        ...
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from .errors import InputError
from .sites import WORKTREES_ENV

__all__ = ["WORKTREES_ENV", "bisect", "bisect_group", "revision_worktree"]

#: What a comparison's decision means for the bisection.
_VERDICT = {"accept": "accept", "reject": "reject", "rerun": "skip", "blocked_by_correctness": "skip"}


def revision_worktree(conditions: dict) -> Path:
    """The checkout of ``conditions["revision"]`` prepared by ``history --bisect``.

    Raises:
        InputError: no ``revision`` condition, no worktree folder set (not under a bisect), or
            no checkout of that revision there.
    """
    revision = str(conditions.get("revision") or "").strip()
    if not revision:
        raise InputError("the workload needs a 'revision' condition to find its checkout")
    root = os.environ.get(WORKTREES_ENV)
    if not root:
        raise InputError(f"no worktree folder: {WORKTREES_ENV} is set by 'mlflow-perfgate history --bisect'")
    path = Path(root) / revision
    if not path.is_dir():
        raise InputError(f"no checkout of revision {revision!r} under {root}")
    return path


def _git(*args: str, cwd: str | os.PathLike | None = None) -> str:
    from .sites import git

    return git(*args, cwd=cwd)


def _benchmark_digest(workload: str, conditions: dict) -> str:
    from .tracking import canonical_value

    payload = {"workload": workload, "conditions": {str(k): canonical_value(v) for k, v in sorted(conditions.items())
                                                    if k != "revision"}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def bisect_group(workload: str, conditions: dict, good: str, revision: str) -> str:
    """The group of the comparison of ``revision`` against ``good`` for this benchmark (full shas)."""
    return f"bisect/{_benchmark_digest(workload, conditions)}/{good[:12]}..{revision[:12]}"


def _recorded_verdicts(workload: str, conditions: dict, good: str, experiment_name: str | None) -> dict[str, dict]:
    """The newest decision of every comparison already recorded against ``good`` for this benchmark (one search)."""
    from .tracking import decisions

    prefix = f"bisect/{_benchmark_digest(workload, conditions)}/{good[:12]}.."
    try:
        frame = decisions(experiment_name=experiment_name)
    except InputError:  # no such experiment yet: nothing recorded
        return {}
    known: dict[str, dict] = {}
    for _, row in frame.iterrows():  # newest first: the first seen of a group is its latest decision
        group = row["group"] or ""
        if group.startswith(prefix) and group[len(prefix):] not in known:
            known[group[len(prefix):]] = {"decision": row["decision"], "decision_run_id": row["run_id"],
                                          "group": group}
    return known


def bisect(good: str, bad: str, *, workload: str, conditions: dict, attempts: int | None = None,
           max_attempts: int | None = None, margin: float = 0.05, method: str = "paired",
           supervised: bool = True, timeout_s: float = 300.0, runner: str = "auto",
           experiment_name: str | None = None, keep_worktrees: bool = False, progress: bool = False,
           on_step: Callable[[str], None] | None = None, repository: str | os.PathLike | None = None,
           **thresholds: Any) -> dict:
    """Find the first commit between ``good`` and ``bad`` whose benchmark regressed against ``good``.

    Method: ``git bisect`` on the first-parent history from ``good`` (exclusive) to ``bad``
    (``git rev-list --reverse --ancestry-path --first-parent good..bad``). ``bad`` is confirmed
    first (a comparison against ``good``; its decision may already be recorded). Then, while
    :func:`~mlflow_perfgate.rules.bisect_next` proposes a revision, it is compared against
    ``good``: ``accept`` (no slowdown beyond ``margin``) is good, ``reject`` bad, ``rerun`` or
    ``blocked_by_correctness`` a skip (never proposed again, as ``git bisect skip``). Every
    comparison is a group ``bisect/<benchmark>/<good>..<revision>``: a decision recorded there
    before (by an earlier bisect of the same benchmark from the same good revision) is reused,
    never run again. Its attempts carry the revision's commit time (read from git), so they
    also join the benchmark's history.

    Args:
        good, bad: revisions of the repository (any name git resolves to a commit).
        workload: the workload factory (each revision's children import it from the revision's
            worktree; one outside the repository finds the code with :func:`revision_worktree`).
        conditions: its fixed conditions (``revision`` is the variable).
        attempts, max_attempts: rounds (attempts per arm; ``None``: compare's default, 10), and the cap
            when adding more while undecided (``None``: no more).
        margin, method: the comparison's non-regression margin and its method (``paired`` or ``robust``);
            every comparison is ``compare``'s with its defaults otherwise: lockstep rounds (each
            revision in a child of its own, their measured steps alternated), the 10th-percentile
            step, one thread. The step tail's bound (``maximum_p95_ratio``) is ``1 + margin`` unless
            ``thresholds`` give it, so that the tail is held to the slowdown the bisect asks about.
        supervised, timeout_s, runner: how attempts run (``compare``'s); ``supervised=False`` is
            refused (each revision's code runs in its worktree's children).
        experiment_name: where the comparisons are recorded.
        keep_worktrees: leave the checkouts in place after the bisect.
        progress: show each comparison's progress bar.
        on_step: called with a line of text at each step.
        repository: the repository (default: the working directory's).
        **thresholds: any threshold of the comparisons (``min_valid_runs=...``).

    Returns:
        ``status`` (``found``, ``ambiguous``: only skipped revisions are left; ``not_bad``: ``bad``
        shows no regression against ``good``; ``undecided``: ``bad``'s comparison cannot decide),
        ``first_bad`` and ``subject`` (when found), ``candidates``, ``good``, ``bad``, ``steps``
        (each ``{revision, decision, verdict, group, decision_run_id, reused}``).

    Raises:
        InputError: not a git repository, an unknown revision, ``bad`` not a descendant of ``good``.
    """
    if not supervised:
        raise InputError("a bisect runs each revision's code in its worktree's children (lockstep rounds, one child "
                         "per revision), and --in-process runs none: leave --in-process out")
    # the step tail is held to the margin the bisect asks about, as compare's defaults hold both at 5%
    thresholds.setdefault("maximum_p95_ratio", 1 + margin)
    run = _Bisect(good, bad, repository, workload=workload, conditions=conditions, experiment_name=experiment_name,
                  say=on_step or (lambda line: None),
                  compare_options=dict(attempts=attempts, experiment_name=experiment_name, supervised=supervised,
                                       timeout_s=timeout_s, runner=runner, until_decisive=max_attempts is not None,
                                       max_attempts=max_attempts, progress=progress, method=method,
                                       mode="non_regression", margin=margin, resume=True,
                                       allow_undecidable=True,  # bisect's own floors, said by it
                                       **thresholds))
    saved = os.environ.get(WORKTREES_ENV)
    os.environ[WORKTREES_ENV] = str(run.root)
    try:
        return run.walk()
    finally:
        if saved is None:
            os.environ.pop(WORKTREES_ENV, None)
        else:
            os.environ[WORKTREES_ENV] = saved
        if not keep_worktrees:
            run.remove_worktrees()


class _Bisect:
    """One bisect's state: the revisions, what is recorded, the verdicts and steps so far, its worktrees."""

    def __init__(self, good: str, bad: str, repository, *, workload: str, conditions: dict,
                 experiment_name: str | None, say: Callable[[str], None], compare_options: dict):
        self.workload, self.conditions, self.say, self.options = workload, conditions, say, compare_options
        self.top = top = _git("rev-parse", "--show-toplevel", cwd=repository)
        self.good = _git("rev-parse", "--verify", f"{good}^{{commit}}", cwd=top)
        self.bad = _git("rev-parse", "--verify", f"{bad}^{{commit}}", cwd=top)
        if self.good == self.bad:
            raise InputError(f"good and bad are the same commit ({self.good[:12]})")
        listed = _git("rev-list", "--reverse", "--ancestry-path", "--first-parent", f"{self.good}..{self.bad}", cwd=top)
        self.revisions = [line for line in listed.splitlines() if line]
        if not self.revisions or self.revisions[-1] != self.bad:
            raise InputError(f"bad ({bad}) is not a descendant of good ({good}) on the first-parent history")
        from .sites import worktree_root

        self.root = worktree_root(top)
        self.root.mkdir(parents=True, exist_ok=True)
        self.known = _recorded_verdicts(workload, conditions, self.good, experiment_name)
        self.verdicts: dict[str, str | None] = {
            rev: _VERDICT.get(self.known[rev[:12]]["decision"]) if rev[:12] in self.known else None
            for rev in self.revisions}
        self.steps: list[dict] = []
        self.created: list[Path] = []

    def checkout(self, sha: str) -> None:
        from .sites import checkout

        path, made = checkout(self.top, sha)
        if made:
            self.created.append(path)

    def judge(self, rev: str) -> str:
        """``rev`` against good: its recorded decision, or a comparison run now; the verdict (good, bad, skip)."""
        from .harness import compare

        if rev[:12] in self.known:
            record = self.known[rev[:12]]
            verdict = _VERDICT.get(record["decision"], "skip")
            self.steps.append({"revision": rev, "decision": record["decision"], "verdict": verdict,
                               "group": record["group"], "decision_run_id": record["decision_run_id"], "reused": True})
            return verdict
        self.checkout(self.good)
        self.checkout(rev)
        group = bisect_group(self.workload, self.conditions, self.good, rev)
        result = compare(self.workload, {**self.conditions, "revision": self.good}, {"revision": rev}, group=group,
                         **self.options)
        verdict = _VERDICT[result["decision"]]
        self.steps.append({"revision": rev, "decision": result["decision"], "verdict": verdict, "group": group,
                           "decision_run_id": result["decision_run_id"], "reused": False})
        return verdict

    def walk(self) -> dict:
        """The bad end confirmed, then the steps :func:`~mlflow_perfgate.rules.bisect_next` proposes."""
        from . import rules

        good, bad, say = self.good, self.bad, self.say
        say(f"bisecting {len(self.revisions)} revisions after {good[:12]} up to {bad[:12]} "
            f"({len(self.known)} decisions already recorded)")
        first = self.verdicts[bad] = self.judge(bad)
        say(_step_line(self.steps[-1], "bad end"))
        if first != "reject":
            status = "not_bad" if first == "accept" else "undecided"
            say(f"{bad[:12]} shows no regression against {good[:12]}: nothing to bisect" if status == "not_bad"
                else f"the comparison of {bad[:12]} against {good[:12]} cannot decide: rerun with more attempts")
            return _outcome(status, None, self.top, good, bad, (), self.steps)
        while True:
            step = rules.bisect_next([(rev, self.verdicts[rev]) for rev in self.revisions], good, bad)
            if step.status != "next":
                break
            say(f"step {len(self.steps)}: {len(step.candidates)} candidates left, at most {step.steps_left} more "
                "comparisons")
            self.verdicts[step.revision] = self.judge(step.revision)
            say(_step_line(self.steps[-1]))
        if step.status == "found":
            subject = _git("show", "-s", "--format=%s", step.revision, cwd=self.top)
            say(f"first bad commit: {step.revision} {subject}")
            return _outcome("found", step.revision, self.top, good, bad, step.candidates, self.steps, subject=subject)
        say(f"ambiguous: only skipped revisions are left; the first bad commit is one of "
            f"{', '.join(rev[:12] for rev in step.candidates)}")
        return _outcome("ambiguous", None, self.top, good, bad, step.candidates, self.steps)

    def remove_worktrees(self) -> None:
        from .sites import remove_worktree

        for path in self.created:
            remove_worktree(self.top, path)


def _step_line(step: dict, what: str | None = None) -> str:
    source = "recorded before" if step["reused"] else f"group {step['group']}"
    label = {"accept": "good", "reject": "bad", "skip": "skipped"}[step["verdict"]]
    head = f"  {what}: " if what else "  "
    return f"{head}{step['revision'][:12]}: {step['decision']} -> {label} ({source}, decision run {step['decision_run_id']})"


def _outcome(status: str, first_bad: str | None, top: str, good: str, bad: str, candidates, steps: list,
             subject: str | None = None) -> dict:
    return {"status": status, "first_bad": first_bad, "subject": subject, "candidates": list(candidates),
            "good": good, "bad": bad, "repository": top, "steps": steps}
