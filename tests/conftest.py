"""Session-wide hooks. The local serving stack starts right after collection, in the background,
so it comes up while the fast tests run (see tests/e2e/stack.py)."""

from __future__ import annotations

import pytest

from tests.e2e import stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stack.launch_if_wanted(config, items)


def pytest_unconfigure(config: pytest.Config) -> None:
    stack.stop_if_launched(config)
