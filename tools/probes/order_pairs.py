"""A pytest plugin for the probe of the preparation-order effect (`-p tools.probes.order_pairs`): every paired
cell gets ORDER_PAIRS process pairs (default 4), whatever its verdicts, and in each the two sides prepare one
after the other, never at once, the first alternating A, B, A, B (perfgate.ab.duet.measure's own rule).

Why: under a device plant every cell gets two process pairs, the sides prepared one after the other, A first
in the first pair and B in the second. upernet_convnext_t train read 2.44 then 0.75 % on 4xH200 80f45bd0, and
3.7 points more in the first pair than the second on 2xH200 23ebdea2; segformer_b2 train 1.1 points more on
80f45bd0. If the process that prepares (and takes its GPU memory) second runs some kernels slower for its
life, the order shows in every pair here; the A/A records cannot tell (a second pair follows only a first that
read high). A change of allocator that takes it out (PYTORCH_CUDA_ALLOC_CONF, set by tools/probes/order_ab.sh)
would show too.
"""

import os

from perfgate.ab import duet, paired

PAIRS = int(os.environ.get("ORDER_PAIRS", "4"))

_prepare = duet._prepare


def _one_after_other(pair, job_a, job_b, progress, first="a", together=False):
    return _prepare(pair, job_a, job_b, progress, first, False)


duet._prepare = _one_after_other
duet.DUETS = PAIRS
paired.final = lambda comparisons, pairs: pairs >= PAIRS
