import os
import shutil

import pytest


def _bench():
    path = os.environ.get("FERRY_BENCH") or shutil.which("ferry-bench")
    if not path or not os.path.exists(path):
        pytest.fail("FERRY_BENCH must point to the ferry-bench executable (tests/run_all.sh sets it)")
    return path


@pytest.fixture(scope="session")
def ferry_bench():
    return _bench()


@pytest.fixture(scope="session")
def sample_data():
    path = os.environ.get("FERRY_SAMPLE_DATA")
    if not path or not os.path.isdir(path):
        pytest.fail("FERRY_SAMPLE_DATA must point to the sample ImageFolder (bench/setup.sh builds it)")
    return path
