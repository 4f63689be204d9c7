"""The formatters every report shares: a headline in MiB and GiB, a column in one unit,
a signed percentage that never reads -0.0%."""

from __future__ import annotations

from caffemem.units import mib_column, mib_gib, plural, signed_percent


def test_a_count_takes_its_nouns_plural_only_when_it_is_not_one():
    assert [plural(n, "shared slot") for n in (0, 1, 2)] == ["0 shared slots", "1 shared slot", "2 shared slots"]
    assert plural(1, "storage class", "storage classes") == "1 storage class" and plural(1_000, "storage class", "storage classes") == "1,000 storage classes"


def test_a_headline_gives_mib_and_gib():
    # 2,757,806,232 B = 2,630.05 MiB = 2.57 GiB (GoogLeNet TRAIN at batch 32, a CPU run).
    assert mib_gib(2_757_806_232) == "2,630.05 MiB (2.57 GiB)"


def test_a_column_stays_in_mib_even_for_a_few_bytes():
    assert [mib_column(n) for n in (0, 12, 2_068, 5_243, 545_259)] == ["0.00 MiB", "<0.01 MiB", "<0.01 MiB", "0.01 MiB", "0.52 MiB"]


def test_a_signed_percentage_that_rounds_to_zero_has_no_sign():
    assert [signed_percent(part, 100_000) for part in (0, -40, 40, -100, 24_600)] == ["0.0%", "0.0%", "0.0%", "-0.1%", "+24.6%"]
    assert signed_percent(5, 0) == "0.0%"
