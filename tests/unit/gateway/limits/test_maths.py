"""The day's turn of the daily quota, as a pure function (the backends' suite covers the rest)."""

from __future__ import annotations

import pytest

from gateway.limits.maths import carried


@pytest.mark.parametrize(
    ("used", "day", "today", "daily", "expected"),
    [
        (700, 10, 10, 1000, 700),  # same day: all of it counts
        (700, 10, 11, 1000, 0),  # within the quota: nothing carries over
        (2600, 10, 11, 1000, 1600),  # the debt carries over
        (2600, 10, 12, 1000, 600),  # each day passed pays off one quota
        (2600, 10, 13, 1000, 0),
        (2600, 11, 10, 1000, 2600),  # a clock that went back forgives nothing
        (2600, 10, 11, None, 0),  # no daily limit: nothing to count against
        (0, -1, 10, 1000, 0),  # a fresh subject
    ],
)
def test_the_usage_above_each_days_quota_carries_over(
    used: int, day: int, today: int, daily: int | None, expected: int
) -> None:
    assert carried(used, day, today, daily) == expected
