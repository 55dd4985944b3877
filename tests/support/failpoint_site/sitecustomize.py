"""Arms `fsio` failpoints in a Python process the tests start (see tests/support/failpoints.py).

Python imports `sitecustomize` at startup from the first `sys.path` entry that has one;
the tests put this directory first on `PYTHONPATH` of a child process they mean to
crash or fail, with the failpoints in `SINGULARITY_TEST_FAILPOINTS`. Production code
never reads that variable.
"""

import os

_SPEC = os.environ.get("SINGULARITY_TEST_FAILPOINTS")
if _SPEC:
    from singularity.storage import fsio

    fsio.arm_failpoints(_SPEC)
