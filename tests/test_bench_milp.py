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
