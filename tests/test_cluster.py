"""Jobs on dask.distributed: a LocalCluster of real worker processes."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # each LocalCluster takes seconds to start

from compare.cluster import run_on_dask  # noqa: E402
from piper_ilp.errors import InputError, InternalError  # noqa: E402
from jobs_for_tests import die_once, fail, square  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1")
    yield c
    c.close()


def test_a_local_cluster_started_here_runs_every_job_once():
    out = []
    run_on_dask(square, range(8), out.append, scheduler="local", workers=2)
    assert sorted(r["id"] for r in out) == list(range(8))
    assert all(r["square"] == r["id"] ** 2 for r in out)


def test_a_worker_that_dies_loses_only_its_running_task(cluster, tmp_path):
    marker = tmp_path / "died"
    out = []
    run_on_dask(die_once, [(n, str(marker)) for n in range(8)], out.append, scheduler=cluster.scheduler_address)
    assert marker.exists()  # job 3 did kill its worker once
    assert sorted(r["id"] for r in out) == list(range(8))  # ... and every job finished exactly once
    assert int(marker.read_text()) not in {r["pid"] for r in out if r["id"] == 3}


def test_stop_cancels_the_rest(cluster):
    out = []
    run_on_dask(square, range(200), out.append, scheduler=cluster.scheduler_address, stop=lambda: len(out) >= 3)
    assert 3 <= len(out) < 200


def test_a_failing_job_is_reported_after_the_finished_results(cluster):
    out = []
    with pytest.raises(InternalError, match="job 2 failed on the dask cluster: ValueError: job 2 is broken"):
        run_on_dask(fail, range(5), out.append, scheduler=cluster.scheduler_address, name=str)


def test_bad_scheduler_addresses_are_input_errors():
    with pytest.raises(InputError, match="expected 'local' or an address"):
        run_on_dask(square, [1], print, scheduler="localhost:1234")
    with pytest.raises(InputError, match="cannot reach"):
        run_on_dask(square, [1], print, scheduler="tcp://127.0.0.1:9")
