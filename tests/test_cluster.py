"""Jobs on dask.distributed: a LocalCluster of real worker processes."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # each LocalCluster takes seconds to start

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from jobs_for_tests import die_once, fail, square, temp_then_wait  # noqa: E402

from compare.experiments.campaign import read_results  # noqa: E402
from compare.experiments.cluster import run_on_dask  # noqa: E402
from compare.experiments.sweep import run_sweep, sweep_points  # noqa: E402
from piper_ilp import load_instance  # noqa: E402
from piper_ilp.errors import InputError, InternalError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    c = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address="127.0.0.1:0",
        host="127.0.0.1",
    )
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
    run_on_dask(
        die_once,
        [(n, str(marker)) for n in range(8)],
        out.append,
        scheduler=cluster.scheduler_address,
    )
    assert marker.exists()  # job 3 did kill its worker once
    assert sorted(r["id"] for r in out) == list(range(8))  # ... and every job finished exactly once
    assert int(marker.read_text()) not in {r["pid"] for r in out if r["id"] == 3}


def test_stop_cancels_the_rest(cluster):
    out = []
    run_on_dask(
        square,
        range(200),
        out.append,
        scheduler=cluster.scheduler_address,
        stop=lambda: len(out) >= 3,
    )
    assert 3 <= len(out) < 200


def test_a_stopped_local_cluster_leaves_no_temporary_folder_of_its_running_jobs(tmp_path):
    # a running job is a thread of its worker: killed, it cannot remove its temporary
    # folder (CBC's model files), so the workers of a cluster started here write their
    # temporary files in a folder of the command's, removed once the workers have ended
    where = tmp_path / "folder"
    run_on_dask(
        temp_then_wait, [str(where)], print, scheduler="local", workers=1, stop=where.exists
    )
    folder = Path(where.read_text())
    assert folder.name.startswith("piper-test-job-")
    assert not folder.exists()


def test_a_failing_job_is_reported_after_the_finished_results(cluster):
    out = []
    with pytest.raises(
        InternalError, match="job 2 failed on the dask cluster: ValueError: job 2 is broken"
    ):
        run_on_dask(fail, range(5), out.append, scheduler=cluster.scheduler_address, name=str)


def test_bad_scheduler_addresses_are_input_errors():
    with pytest.raises(InputError, match="expected 'local' or an address"):
        run_on_dask(square, [1], print, scheduler="localhost:1234")
    with pytest.raises(InputError, match="cannot reach"):
        run_on_dask(square, [1], print, scheduler="tcp://127.0.0.1:9")


def _alive_children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def test_a_campaign_on_a_local_cluster_resumes_after_its_client_is_killed(tmp_path):
    out = tmp_path / "c"
    args = [
        sys.executable,
        "-m",
        "piper_cli",
        "campaign",
        "--count",
        "30",
        "--seed",
        "5",
        "--scheduler",
        "local",
        "--workers",
        "2",
        "--methods",
        "dp,brute",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_results(out)) < 3 and proc.poll() is None:
        time.sleep(0.2)
    children = _alive_children_of(proc.pid)
    proc.kill()  # SIGKILL: the client cannot clean up
    proc.wait()
    for _ in range(100):  # the cluster's processes notice and go
        if not [
            c
            for c in children
            if Path(f"/proc/{c}").exists()
            and "Z" not in (Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0])
        ]:
            break
        time.sleep(0.2)
    assert all(
        not Path(f"/proc/{c}/cmdline").exists() or not Path(f"/proc/{c}/cmdline").read_bytes()
        for c in children
    )
    before = len(read_results(out))
    assert before >= 1
    p = subprocess.run(args + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    ids = [r["id"] for r in read_results(out)]
    lines = [
        ln
        for ln in (out / "results.jsonl").read_text().splitlines()
        if ln.startswith("{") and ln.endswith("}")
    ]
    assert len(ids) == len(set(ids)) == 30 and len(lines) == 30


def test_a_sweep_on_a_local_cluster(tmp_path):
    inst = load_instance(REPO / "inputs" / "small.json")
    points = sweep_points([4, 8], [6e8], [inst.N], [inst.B], ["all", "2bw"])
    rows = run_sweep(inst, points, tmp_path / "s", workers=2, scheduler="local")
    local = run_sweep(inst, points, tmp_path / "p", workers=1)
    assert [(r["id"], r["status"], r["tps"]) for r in rows] == [
        (r["id"], r["status"], r["tps"]) for r in local
    ]


def test_a_campaign_prints_nothing_on_stderr_when_another_cluster_holds_the_dashboard_port(
    tmp_path,
):
    # the dashboard's default port taken by another cluster must not add warning lines
    from distributed import LocalCluster

    other = LocalCluster(n_workers=1, processes=False, dashboard_address=":8787")
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "piper_cli",
                "campaign",
                "--count",
                "6",
                "--nodes",
                "3-4",
                "--methods",
                "dp,brute",
                "--scheduler",
                "local",
                "--out",
                str(tmp_path / "c"),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
    finally:
        other.close()
    assert p.returncode == 0 and p.stderr == "", p.stderr
