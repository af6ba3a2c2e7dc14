"""Where the CLI's outputs go: never over an input, devices and FIFOs written in place,
symlinks followed (the link kept), a folder refused; failed writes to standard output.

Every device, FIFO and symlink here is made under tmp_path (a symlink to /proc/self/fd/N
stands for /dev/stdout): a broken version of the code must not be able to replace a real
device node or a shared file.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest
from conftest import INPUTS, REPO
from typer.testing import CliRunner

from piper_cli import app

runner = CliRunner()

GRAPH_TXT = (
    "\n".join(
        [
            "node1 -- Input -- forward_compute_time=0.000, backward_compute_time=0.000, "
            "activation_size=7.0, parameter_size=0.000",
            "node2 -- Linear(a) -- forward_compute_time=600.000, backward_compute_time=400.000, "
            "activation_size=10.0, parameter_size=0.000",
            "\tnode1 -- node2",
        ]
    )
    + "\n"
)


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    """``python -m piper_cli ARGS`` in a fresh process (the real entry point, main())."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "piper_cli", *map(str, args)],
        check=False,
        cwd=REPO,
        env=env,
        timeout=120,
        **kwargs,
    )


def _fingerprint(path) -> tuple:
    st = os.lstat(path)
    return st.st_ino, st.st_mode, open(path, "rb").read()


@pytest.fixture
def inst(tmp_path):
    p = tmp_path / "inst.json"
    shutil.copy(INPUTS / "small.json", p)
    return p


@pytest.fixture
def plan(tmp_path):
    p = tmp_path / "plan.json"
    shutil.copy(INPUTS / "small.plan.json", p)
    return p


@pytest.fixture
def graph(tmp_path):
    p = tmp_path / "graph.txt"
    p.write_text(GRAPH_TXT)
    return p


# ---- an output path that is one of the command's inputs: one line, exit 2, input untouched ----


@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize(
    "command", ["solve", "solve-model", "deepen", "towers", "import", "simulate"]
)
def test_an_output_over_an_input_is_refused(tmp_path, inst, plan, graph, command, alias):
    target = graph if command == "import" else plan if command == "simulate" else inst
    out = target
    if alias == "symlink":
        out = tmp_path / "alias"
        out.symlink_to(target.name)
    elif alias == "hardlink":
        out = tmp_path / "alias"
        os.link(target, out)
    args = {
        "solve": ["solve", inst, "-o", out],
        "solve-model": ["solve", inst, "--method", "cpsat", "--write-model", out],
        "deepen": ["deepen", inst, "-L", "9", "-o", out],
        "towers": ["towers", inst, "-L", "2,2", "-o", out],
        "import": ["import", "pipedream", graph, "-o", out],
        "simulate": ["simulate", inst, plan, "--gantt", out],
    }[command]
    before = _fingerprint(target)
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    assert "would overwrite" in r.output and r.output.count("\n") == 1, r.output
    assert str(target) in r.output or str(out) in r.output
    assert _fingerprint(target) == before


def test_a_plot_over_its_results_is_refused(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    results = folder / "results.jsonl"
    results.write_text('{"id": "a", "variant": "all"}\n')
    before = _fingerprint(results)
    r = runner.invoke(app, ["plot", str(folder), "-o", str(results)])
    assert r.exit_code == 2 and "would overwrite" in r.output and r.output.count("\n") == 1, (
        r.output
    )
    assert _fingerprint(results) == before


def test_a_sweep_folder_holding_the_instance_is_refused(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    inst = out / "results.csv"
    shutil.copy(INPUTS / "small.json", inst)
    before = _fingerprint(inst)
    r = runner.invoke(app, ["sweep", str(inst), "--out", str(out), "--variants", "all"])
    assert r.exit_code == 2 and "would overwrite" in r.output and r.output.count("\n") == 1, (
        r.output
    )
    assert _fingerprint(inst) == before


# ---- a folder: one line, exit 2 ----


@pytest.mark.parametrize("command", ["solve", "random", "deepen"])
def test_a_folder_as_output_is_one_line(tmp_path, inst, command):
    folder = tmp_path / "folder"
    folder.mkdir()
    args = {
        "solve": ["solve", inst, "-o", folder],
        "random": ["random", "-o", folder],
        "deepen": ["deepen", inst, "-L", "9", "-o", folder],
    }[command]
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 2 and "is a folder" in r.output and r.output.count("\n") == 1, r.output
    assert folder.is_dir()


# ---- FIFOs, devices and symlinks ----


def _open_fifo_reader(path) -> int:
    os.mkfifo(path)
    return os.open(
        path, os.O_RDONLY | os.O_NONBLOCK
    )  # a reader, so that the writer's open goes through


def _drain(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_random_to_a_fifo_writes_into_it(tmp_path):
    fifo = tmp_path / "fifo"
    fd = _open_fifo_reader(fifo)
    r = cli("random", "--nodes", "3", "-o", fifo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert b'"nodes"' in _drain(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_an_infeasible_solve_does_not_remove_a_fifo(tmp_path, inst):
    fifo = tmp_path / "fifo"
    fd = _open_fifo_reader(fifo)
    r = cli("solve", inst, "-M", "1", "-o", fifo, capture_output=True, text=True)
    assert r.returncode == 0 and "infeasible" in r.stdout, r.stderr
    assert _drain(fd) == b"" and "removed" not in r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_character_device_is_written_in_place(tmp_path):
    null = tmp_path / "null"
    try:  # our own /dev/null, made here (root only)
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        open(null, "w").close()
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    r = cli("random", "--nodes", "3", "-o", null, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_link_to_stdout_prints_to_stdout(tmp_path):
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    r = cli("random", "--nodes", "3", "-o", link, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"nodes"' in r.stdout
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert [p.name for p in tmp_path.iterdir()] == ["stdout"]  # no temporary file left


def test_a_link_to_stdout_redirected_to_a_file_follows_what_was_printed(tmp_path, inst):
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    log = tmp_path / "log"
    with open(log, "w") as fh:
        r = cli("solve", inst, "-o", link, stdout=fh, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    table, _, plan_text = text.partition("\n{")
    assert (
        "optimal" in table and '"stages"' in plan_text
    )  # the table first, then the plan: nothing overwritten
    assert link.is_symlink()


def test_a_symlink_to_a_file_writes_the_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    r = cli("random", "--nodes", "3", "-o", link, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert '"nodes"' in real.read_text()


def test_an_infeasible_solve_removes_the_stale_plan_behind_a_link_not_the_link(tmp_path, inst):
    real = tmp_path / "real.json"
    real.write_text("{}\n")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    r = cli("solve", inst, "-M", "1", "-o", link, capture_output=True, text=True)
    assert r.returncode == 0 and "removed stale plan" in r.stderr, r.stderr
    assert link.is_symlink() and not real.exists()


def test_files_level_writes_follow_the_rules(tmp_path):
    from piper_ilp.errors import InputError
    from piper_ilp.files import atomic_write_text, check_writable

    r, w = os.pipe()
    link = tmp_path / "fd"
    link.symlink_to(f"/proc/self/fd/{w}")
    check_writable(link)
    atomic_write_text(link, "through the pipe\n")
    os.close(w)
    assert os.read(r, 100) == b"through the pipe\n"
    os.close(r)
    assert link.is_symlink()
    r, w = os.pipe()
    fd_dir = tmp_path / "fd"  # what /dev/fd is: a link to a folder in /proc
    fd_dir.unlink()
    fd_dir.symlink_to("/proc/self/fd")
    atomic_write_text(fd_dir / str(w), "through the folder link\n")
    os.close(w)
    assert os.read(r, 100) == b"through the folder link\n"
    os.close(r)
    dangling = tmp_path / "dangling"
    dangling.symlink_to("new.json")
    atomic_write_text(dangling, "x\n")
    assert dangling.is_symlink() and (tmp_path / "new.json").read_text() == "x\n"
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(InputError, match="loop"):
        check_writable(loop)


# ---- standard output that fails ----


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["random", "--nodes", "3"],
        ["random", "--nodes", "300"],
        ["solve", INPUTS / "small.json", "--json"],
        ["evaluate", INPUTS / "small.json", INPUTS / "small.plan.json"],
        ["--help"],
    ],
)
def test_a_full_stdout_is_one_line_and_exit_2(args):
    with open("/dev/full", "w") as full:  # opened, never replaced
        r = cli(*args, stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "piper-ilp: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize(
    "args",
    [
        ["random", "--nodes", "3"],
        ["random", "--nodes", "300"],
        ["solve", INPUTS / "small.json", "--json"],
        ["solve", INPUTS / "small.json"],
        ["evaluate", INPUTS / "small.json", INPUTS / "small.plan.json"],
    ],
)
def test_a_closed_pipe_ends_quietly_with_141(args):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    try:
        proc = cli(*args, stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)
    assert proc.stderr == "" and proc.returncode == 141


# ---- campaign: OUT/counterexamples must be a folder ----


def test_campaign_with_counterexamples_a_file_is_refused_up_front(tmp_path):
    out = tmp_path / "camp"
    out.mkdir()
    (out / "counterexamples").write_text("not a folder\n")
    args = "campaign --count 1 --nodes 2-2 --methods dp,brute --workers 1".split()
    r = runner.invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "counterexamples" in r.output and r.output.count("\n") == 1
    assert not (out / "results.jsonl").exists() or (out / "results.jsonl").read_text() == ""
