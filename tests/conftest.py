"""Hypothesis profiles for the engine's tests (tests/test_properties.py).

`ci`, which the test command selects with --hypothesis-profile=ci: the same generated examples on every run
(derandomize, seeded from each test's own code) and no example database, so a CI verdict depends on the
commit alone and never on luck or on a database left by an earlier run. Without the option the default
profile holds: random examples and the local database, so a developer's runs keep exploring and replay what
they found. A bug found that way is pinned with @example, and then CI checks it on every run too.
"""

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
