"""`fit --effective-batch` in bounded work for any value (issue 26, item 5): the divisors
come from the prime factors, not from trial division up to √n (10^20 hung for minutes),
and a schedule must fit Caffe's int32 batch and iter_size."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from conftest import FIXTURES

from caffemem.api.analyze import Options
from caffemem.api.fit import MAX_ITER_SIZE, FitRequest, divisors_descending, fit
from caffemem.errors import CaffememError

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
GiB = 2**30
INT32_MAX = 2**31 - 1  # a prime (Mersenne's M31)


def trial_division(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]), reverse=True)


def test_divisors_are_those_of_trial_division_for_every_n_to_3000():
    assert all(divisors_descending(n) == trial_division(n) for n in range(1, 3001))


@pytest.mark.parametrize(
    ("n", "divisors"),
    [
        (INT32_MAX**2, [INT32_MAX**2, INT32_MAX, 1]),  # the largest batch × iter_size: √n is 2^31
        (INT32_MAX * (2**31 - 19), [INT32_MAX * (2**31 - 19), INT32_MAX, 2**31 - 19, 1]),  # two primes near 2^31
        (2**61 - 1, [2**61 - 1, 1]),  # a prime
    ],
)
def test_divisors_of_numbers_near_caffes_limit(n, divisors):
    assert divisors_descending(n) == divisors


def test_10_to_the_20_divides_into_441_divisors():
    # 10^20 = 2^20 × 5^20: (20 + 1) × (20 + 1) divisors
    assert len(divisors_descending(10**20)) == 441


def test_the_issues_effective_batch_of_10_to_the_20_is_refused_at_once():
    proc = subprocess.run(
        [sys.executable, "-m", "caffemem", "fit", LENET, "--gpu-memory", "12GiB", "--effective-batch", "100000000000000000000"],
        capture_output=True,
        text=True,
        timeout=300,  # it ran for minutes before; the refusal needs no evaluation
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (f"caffemem: error: --effective-batch 100000000000000000000 is more than Caffe can reach: batch × iter_size per GPU is at most {INT32_MAX**2} (both are int32)\n")


def test_an_iter_size_past_int32_is_no_schedule():
    # INT32_MAX² samples: batch INT32_MAX does not fit a 1 GiB card, batch 1 needs iter_size INT32_MAX²
    with pytest.raises(CaffememError, match=f"with an iter_size Caffe can hold \\(at most {MAX_ITER_SIZE}, an int32\\)"):
        fit(LENET, Options(), FitRequest(gpu_memory=GiB, effective_batch=INT32_MAX**2))


def test_an_effective_batch_of_1024_times_int32_max_runs_batch_1024_with_iter_size_int32_max():
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, effective_batch=1024 * INT32_MAX))
    assert result.search.batch >= 1024  # the divisors of 1024 × M31 below M31: the powers of two
    assert (result.schedule.batch, result.schedule.iter_size) == (1024, INT32_MAX)
