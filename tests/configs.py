"""The configuration tests of other things run their comparisons in.

``compare``'s defaults are the recommended configuration (the paired method on p10, both arms'
steps interleaved in one child, 10 rounds of 30 steps). A test whose subject is something else
(a crash counted, a resume, a store outage) and that runs one or two attempts per arm, or counts
children and failures per attempt, names the specification's rule on whole attempts instead:
what ``compare`` ran by default before.
"""

SPEC = {"method": "seed", "interleave": "attempts"}
SPEC_FLAGS = ["--method", "seed", "--interleave", "attempts"]
