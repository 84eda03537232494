"""Fixtures of the ACP tests: the fake parent of a bridge under test (tests/child)."""

from tests.child.conftest import parent  # noqa: F401
