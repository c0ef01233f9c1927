"""Stand-in for the `expecttest` package, which Debian does not ship.

PyTorch's test utilities (torch.testing._internal.common_utils) import it for
expect-file tests; the distributed suite uses none of those and needs only
these two names.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    pass
