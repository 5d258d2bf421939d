"""The noise lab: every decision method judged on real TinyLM attempts under contention it makes itself.

What it does, in order:

1. **Calibrates** the true effects on a quiet moment (no neighbour started yet): real attempts
   of plain TinyLM and of TinyLM with ``--probe-units`` extra matrix products per step
   (``benchmarks/noise_lab_workload.py``), interleaved; the median step and the cost of one
   unit of extra work (the median over rounds of the within-round latency difference over the
   units) give the units each effect needs. A slowdown ``s`` adds ``s`` x the step to the
   candidate (candidate/baseline = 1 + s); a speedup ``s`` adds ``s / (1 - s)`` x the step to
   the baseline (candidate/baseline = 1 - s). The calibration (step, unit cost, units, load
   average) is printed and kept beside the CSV (``PATH.calibration.json``).
2. **Collects** real attempts: supervised, through the warm fork runner (``attempt_runner
   ("auto")``, ``run_attempt(..., runner=...)``), the harness's default thread count and TinyLM
   conditions (``input_shape`` 4,128, ``warmup`` 2, ``steps`` 10, the probe on), under three
   contention conditions the lab starts and stops itself:

   - ``quiet``: no neighbour;
   - ``steady``: one busy neighbour process per core, each pinned to its core;
   - ``bursty``: two neighbours (pinned to cores 0 and 1, modulo the cores there are) that
     switch on and off, each on its own seeded schedule of periods drawn uniformly from 0.5
     to 3 s (``burst_schedule``).

   For each condition and each effect (identical arms, 5/10/20% faster, 5/10/20% slower), pools
   of interleaved ABBA rounds: a round is one baseline and one candidate attempt, baseline
   first in even rounds; every sweep runs one round of each effect, in a seeded random order,
   so that all effects see the same machine. The conditions run as blocks, ``--cycles`` times
   (quiet, steady, bursty, then reversed, ...). Every attempt is a CSV row as soon as it ends
   (condition, effect, arm, round, latency, per-step times and wait shares, wait share,
   failure, load average, the neighbours busy during it, ...), so ``--from-csv`` recomputes
   everything and a stopped run keeps what it measured.
3. **Judges** windows of ``n`` consecutive rounds (n = 5, 10, 20, in time order, sliding by
   ``--stride``) of each pool with ``mlflow_perfgate.rules.decide`` (records ``{ok,
   latency_ms, quality, pair}``, the pair being the round) for every method (``seed``,
   ``robust``, ``paired``) in ``improvement`` mode (``min_improvement`` 0.05, the default) and
   ``non_regression`` mode (``margin`` 0.05), and by the rules of asv and pyperf on the same
   windows (``asv_verdict``, ``pyperf_verdict``: how their outputs map to accept / reject /
   rerun is written there). Each is judged four times: on ``raw`` latencies (``latency_ms``,
   the median of the attempt's steps), on ``uncontended`` ones (the median of the steps whose
   wait share is at most ``--wait-bound`` 0.05; ``None``, and the attempt left out of the
   window, when fewer than half its steps are kept; its wall time still counts), both of them
   on ``fastest`` ones (the attempt's fastest measured step, ``fastest_step_ms``) and on
   ``p10`` ones (the 10th percentile of its steps, Harrell-Davis, ``step_p10_ms``): all four
   options of ``compare --latency``.
4. **Prints**, first, the default it recommends for ``compare`` (the method and latency option
   that meet the targets best), then the targets (PASS/FAIL) of every method and option, then
   per condition the realised effects and a markdown table: false accept (identical arms,
   improvement mode), false alarm (identical arms, non_regression: a reject), acceptance of
   true speedups, detection of true slowdowns (non_regression rejects), the rerun rates, and
   the median wall time to a decision (the sum of the window's attempt wall times).

The targets (each condition, each method and latency option): identical arms falsely accepted
at most 2% and falsely alarmed at most 5% at every n; a 20% speedup accepted at least 90% at
n = 10, a 10% speedup at least 80% at n = 20; a 20% slowdown detected at least 90% at n = 10;
at most 20% reruns for a 20% effect at n = 10 (either mode); error rates no higher than asv's
and pyperf's (raw latencies, as those tools measure) plus one point, and power (acceptance of
speedups, detection of slowdowns) no lower than either's in every effect cell.

Rates from sliding windows are correlated: a pool of R rounds holds only R // n disjoint
windows of n, shown as ``indep.`` beside every rate; a rate near its target with few disjoint
windows is weak evidence either way.

Also:

- ``--interleave auto`` (the default): identical arms sharing one process (their steps
  interleaved, ``mlflow_perfgate.workloads.run_interleaved``, as ``compare --interleave steps``
  runs them) are also collected under each condition, and their within-process bias is printed
  beside that of separate processes (``collection.interleave_hook``).
- ``--step-mode steps`` collects every pool (every effect) the way ``compare --interleave steps``
  runs: a round is one supervised child holding both arms (the round's leading arm alternates,
  ABBA over rounds), their measured steps interleaved A B B A, so both see the same contention
  within milliseconds; the report then judges those rounds (``--from-csv`` picks them when only
  they carry effects). A round's wall time is its one child's. The calibration runs that way
  too (plain and loaded arms in one child a round): the extra work's cost is measured as the
  attempts will see it.
- ``--fit-simulation FROM_CSV`` fits the noise model of ``benchmarks/decision_quality.py``
  (lognormal body, contention tail) to the plain TinyLM attempts of a CSV at the harness's
  default thread count, per condition, and prints the parameters with the command that runs
  that simulation: the simulation becomes a secondary check fitted to reality.

Neighbours are processes the lab starts and ends by PID. Each also ends itself within
0.1 s when the lab's process is gone (its parent pid changes), when the lease file the
lab touches before every attempt is older than the attempt timeout plus 30 s, or at the end
of its schedule (a bound of four times the block's expected length plus 5 minutes). SIGTERM
unwinds like Ctrl-C. ``/proc/loadavg`` is printed at the start and end of the calibration and
of every condition block.

Usage::

    python benchmarks/noise_lab.py [--rounds 80] [--cycles 2] [--csv PATH] [--jobs 1]
    python benchmarks/noise_lab.py --from-csv PATH [--sizes 5,10,20] [--stride 1]
    python benchmarks/noise_lab.py --fit-simulation PATH

A smoke run (tiny sizes; 54 attempts, about a minute on an idle 2-core machine, 4 minutes
measured at a load average of 6): ``--rounds 3 --cycles 1 --effects 0.2 --sizes 2,3
--calibration-rounds 2``. The full run (the defaults, 3,360 attempts) takes about 45-60 minutes
on an idle 2-core machine; it prints its own estimate once calibrated.

The package (``benchmarks/noise_lab.py`` is the command, and re-exports the names its tests use):

- ``neighbours``: the neighbour processes, their schedules, ``/proc/loadavg``;
- ``attempts``: how the lab runs the product's attempts (``run_attempt``, ``run_interleaved``)
  on its wrapper workload;
- ``effects``: the true effects (extra work per step) and their calibration;
- ``collection``: the CSV's schema, its rows, the blocks of rounds and their collection;
- ``peers``: asv's and pyperf's rules, mapped to accept / reject / rerun;
- ``analysis``: windows of rounds, the latency options, the judges' rates, the targets and the
  recommendation;
- ``report``: the tables and the report; the simulation's noise fitted to the attempts;
- ``cli``: the command line.

Each module imports only those above it in this list. The results the README cites, and the
notebook of the runs, are in ``benchmarks/results/`` (``README.md`` there).
"""
