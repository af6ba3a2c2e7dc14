"""The MILP benchmark (``piper-ilp bench milp``) on the published BERT-32 profile."""

from __future__ import annotations

from compare.bench.milp import run


def test_the_milp_bench_runs_the_bert_rows_from_shared(shared_dir):
    # the bench reads bert32a100.json from the profiles folder; a wrong path printed
    # "skipping bert32a100" and left the bert rows out without failing
    records = run(
        sizes=(),
        bert_ks=(4,),
        backends=("cpsat",),
        time_limit=60,
        threads=1,
        log=lambda *a: None,
        profiles=shared_dir / "piper-inputs",
    )
    assert [(r["group"], r["nodes"], r["K"]) for r in records] == [("bert32a100 K=4", 37, 4)]
    assert records[0]["status"] in ("optimal", "feasible")


def test_the_milp_bench_shows_the_threads_each_backend_ran():
    # SCIP runs 1 thread whatever --threads says (piper_ilp/milp/scip.py); the bench printed
    # the requested count for its rows
    from typer.testing import CliRunner

    from compare.bench.milp import table
    from piper_cli import app

    lines: list[str] = []
    records = run(
        sizes=(4,),
        seeds=1,
        bert_ks=(),
        backends=("cpsat", "scip"),
        time_limit=30,
        threads=2,
        log=lines.append,
    )
    assert [(r["backend"], r["threads"]) for r in records] == [("cpsat", 2), ("scip", 1)]
    assert " 2 thr " in lines[0] and " 1 thr " in lines[1], lines
    rows = [row.split(" | ")[1:3] for row in table(records, 30).splitlines()[2:]]
    assert rows == [["cpsat", "2"], ["scip", "1"]], rows
    args = ["bench", "milp", "--quick", "--sizes", "4", "--seeds", "1", "--bert-k", ""]
    r = CliRunner().invoke(app, [*args, "--backends", "scip", "--threads", "2"])
    assert r.exit_code == 0, r.output
    assert "1 thread," in r.output.splitlines()[0] and "2 threads" not in r.output, r.output


def test_the_milp_bench_counts_the_cpu_of_cbcs_child_process():
    # CBC solves in a child process (piper_ilp/milp/cbc.py): time.process_time alone left
    # its work out of the CPU column; the header says what is counted
    from typer.testing import CliRunner

    from compare.bench.milp import CPU_COUNTED
    from piper_cli import app

    records = run(sizes=(6,), seeds=1, bert_ks=(), backends=("cbc", "cpsat"), time_limit=30)
    cbc, cpsat = records
    assert cbc["child_cpu_seconds"] > 0 and cbc["cpu_seconds"] >= cbc["child_cpu_seconds"]
    assert cpsat["child_cpu_seconds"] == 0  # CP-SAT solves in this process
    args = ["bench", "milp", "--sizes", "4", "--seeds", "1", "--bert-k", "", "--backends", "cbc"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and CPU_COUNTED in r.output.splitlines()[0], r.output
    assert "(CPU s, children too)" in r.output
