"""Settings for the engine's tests: hypothesis profiles, and one torch thread a process under xdist.

`ci`, which the test command selects with --hypothesis-profile=ci: the same generated examples on every run
(derandomize, seeded from each test's own code) and no example database, so a CI verdict depends on the
commit alone and never on luck or on a database left by an earlier run. Without the option the default
profile holds: random examples and the local database, so a developer's runs keep exploring and replay what
they found. A bug found that way is pinned with @example, and then CI checks it on every run too.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)


def pytest_configure(config):
    """Under xdist (the test command's -n 2), each worker and every process its tests start (pytester
    suites, isolated cells, `perfgate ab` sides) runs torch with one thread, unless OMP_NUM_THREADS is set.
    With torch's default of a thread per core, two workers' thread pools spin against each other on the
    2-core CI box: the xdist and isolated-cell tests took 28 s and 25 s under -n 2, 15 s and 12 s with one
    thread, 13 s and 11 s serial, and the whole of tests/ 226 s against 197 s. Runs before collection, so
    before any test module imports torch. The unit tests time nothing that a thread count could falsify."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
