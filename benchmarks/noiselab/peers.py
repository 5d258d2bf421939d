"""The peers' rules: asv's and pyperf's verdicts on the same windows as ours, from their own code,
mapped to accept / reject / rerun (how each maps is written in :func:`asv_verdict` and
:func:`pyperf_verdict`). Both tools come with the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import importlib
import statistics
from typing import Sequence

from mlflow_perfgate.rules._checks import REL_TOL

#: The reference tools whose rules the lab judges by beside ours.
REFERENCES = ("asv", "pyperf")
#: The thresholds every judge is held to, ours and theirs: improvement mode's ``min_improvement``
#: (``compare``'s default) and non_regression mode's ``margin``.
MIN_IMPROVEMENT = 0.05
MARGIN = 0.05


def installed_peers() -> tuple[str, ...]:
    """The reference tools installed here."""
    def installed(tool: str) -> bool:
        try:
            importlib.import_module(tool)
        except ImportError:
            return False
        return True

    return tuple(tool for tool in REFERENCES if installed(tool))


#: asv's marks (``asv compare``) and what each answers in either mode (``asv_verdict``).
ASV_VERDICTS = {
    "improvement": {"-": "accept", "+": "reject", "~": "rerun", " ": "reject", "x": "rerun"},
    "non_regression": {"-": "accept", "+": "reject", "~": "rerun", " ": "accept", "x": "rerun"},
}


def asv_mark(baseline: Sequence[float], candidate: Sequence[float], factor: float) -> str:
    """The mark ``asv compare --factor FACTOR`` gives the candidate against the baseline.

    asv's own code: ``asv_runner.statistics.compute_stats`` (the median and its 99% interval)
    for each arm's samples, then ``asv.commands.compare._is_result_better`` as ``asv compare``
    calls it: ``-`` better (significant, by ``asv._stats.is_different``: a two-sided
    Mann-Whitney U test at p < 0.002 when the samples can reach it, else non-overlapping 99%
    intervals; and the candidate's median below the baseline's / factor), ``+`` worse (the
    same the other way), ``~`` beyond the factor but not significant, `` `` within the factor.
    ``x``: an arm without a successful attempt (asv's failed result).
    """
    from asv.commands.compare import _is_result_better
    from asv_runner.statistics import compute_stats

    if not baseline or not candidate:
        return "x"
    base, base_stats = compute_stats(list(baseline), 1)
    cand, cand_stats = compute_stats(list(candidate), 1)
    base_ss, cand_ss = (base_stats, list(baseline)), (cand_stats, list(candidate))
    if _is_result_better(cand, base, cand_ss, base_ss, factor):
        return "-"
    if _is_result_better(base, cand, base_ss, cand_ss, factor):
        return "+"
    if _is_result_better(base, cand, None, None, factor) or _is_result_better(cand, base, None, None, factor):
        return "~"
    return " "


def asv_verdict(baseline: Sequence[float], candidate: Sequence[float], mode: str,
                min_improvement: float = MIN_IMPROVEMENT, margin: float = MARGIN) -> str:
    """asv's rule mapped to accept / reject / rerun (:data:`ASV_VERDICTS`).

    The factor is the mode's threshold: ``1 / (1 - min_improvement)`` in improvement mode (a
    median below the baseline's / factor is ``min_improvement`` faster), ``1 + margin`` in
    non_regression mode. ``-`` (significantly faster beyond the factor) accepts in either mode
    and ``+`` rejects; ``~`` (beyond the factor, not significant) is a rerun: asv cannot tell;
    `` `` (within the factor) rejects in improvement mode (not faster by the factor) and accepts
    in non_regression mode (what ``asv continuous`` passes). Only accept-versus-rerun depends
    on these choices; the error and power figures read accepts in improvement mode and rejects
    in non_regression mode.
    """
    factor = 1 / (1 - min_improvement) if mode == "improvement" else 1 + margin
    return ASV_VERDICTS[mode][asv_mark(baseline, candidate, factor)]


class _Values:
    """The one method of a ``pyperf.Benchmark`` that ``pyperf._compare.is_significant_benchs`` reads."""

    def __init__(self, values: Sequence[float]):
        self._values = list(values)

    def get_values(self) -> list[float]:
        return self._values


def pyperf_verdict(baseline: Sequence[float], candidate: Sequence[float], mode: str,
                   min_improvement: float = MIN_IMPROVEMENT, margin: float = MARGIN) -> str:
    """pyperf's rule mapped to accept / reject / rerun.

    pyperf's own code: ``pyperf._compare.is_significant_benchs`` (``pyperf compare_to``'s
    test: Student's two-sample t-test with pooled variance, two-tailed at 95%; with equal
    sizes its statistic is Welch's; unequal sizes or all-equal samples make it raise, and pyperf
    then calls the difference significant: its FIXME, kept), and the ratio of means
    (``compute_normalized_mean``: candidate mean / baseline mean). Not significant: a rerun
    (pyperf hides the benchmark as not significant). Significant: improvement mode accepts when
    the ratio is at most ``1 - min_improvement`` (``--min-speed`` at that threshold) and
    rejects otherwise; non_regression mode rejects when it exceeds ``1 + margin`` and accepts
    otherwise. An arm without a successful attempt: a rerun.
    """
    from pyperf._compare import is_significant_benchs

    if not baseline or not candidate:
        return "rerun"
    significant, _ = is_significant_benchs(_Values(baseline), _Values(candidate))
    if not significant:
        return "rerun"
    ratio = statistics.fmean(candidate) / statistics.fmean(baseline)
    if mode == "improvement":
        return "accept" if ratio <= (1 - min_improvement) * (1 + REL_TOL) else "reject"
    return "reject" if ratio > (1 + margin) * (1 + REL_TOL) else "accept"
