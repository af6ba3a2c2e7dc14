"""Small builders for instances written inline in tests."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

from typer.testing import CliRunner

from compare.crosscheck.brute import solve_brute
from piper_cli import app
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_dict, instance_from_dict
from piper_ilp.instance import option_dict as _option_dict
from piper_ilp.milp.certify import certify
from piper_ilp.milp.model import formulate, index_sets
from piper_ilp.mode import DEFAULT_MODE
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, divisors


def make_instance(nodes, edges=(), K=2, N=2, M=1e9, B=1.0):
    """An instance from (id, TMPCs) pairs and (u, v, c) edges."""
    return instance_from_dict(instance_dict(nodes, edges, K=K, M=M, N=N, B=B))


def fork_instance():
    """The fork 0 -> {1, 2} -> 3 with one option each (p = 1, one unit of memory per
    microbatch), K = N = 4 and M = 3.5: with four stages of d = 1, sequential pipelining holds
    y = 4, 3, 2, 1 (stage 0 does not fit) and graph pipelining y = 3, 2, 2, 1 (it fits:
    cost model sec. 8); gpipe holds N / d = 4 everywhere."""
    succ = {0: [1, 2], 1: [3], 2: [3], 3: []}
    pred = {0: [], 1: [0], 2: [0], 3: [1, 2]}
    edges = [(u, v, 0.0) for u in succ for v in succ[u]]
    nodes = [
        (
            v,
            {
                "1": [
                    option_dict(
                        p=1.0,
                        a=1.0,
                        sfw=dict.fromkeys(pred[v], 0.0),
                        sbw=dict.fromkeys(succ[v], 0.0),
                    )
                ]
            },
        )
        for v in range(4)
    ]
    return make_instance(nodes, edges, K=4, N=4, M=3.5)


def json_lines(output: str) -> list[dict]:
    """The JSON objects printed one per line in a command's output."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def option_dict(oid="vanilla", p=1.0, w=0.0, a=0.0, b=0.0, sfw=None, sbw=None) -> dict:
    """One option in the JSON form of cost model sec. 1, with defaults for tests (sync keys
    become strings)."""
    return _option_dict(
        oid,
        p,
        w,
        a,
        b,
        {str(k): v for k, v in (sfw or {}).items()},
        {str(k): v for k, v in (sbw or {}).items()},
    )


def enumerated_optimum(inst):
    """The least TPS that the evaluator gives over :func:`every_plan` (None if no plan is
    valid): the definition of the optimum, with no shortcut."""
    return min(
        (ev.tps for ev in map(lambda p: evaluate(inst, p), every_plan(inst)) if ev.valid),
        default=None,
    )


def every_plan(inst):
    """Every plan, naively: all ordered set partitions, all degrees, all options."""
    ids = inst.node_ids
    n = len(ids)
    for k in range(1, n + 1):
        for labels in itertools.product(range(k), repeat=n):
            if set(labels) != set(range(k)):
                continue
            groups = [tuple(v for v, lab in zip(ids, labels) if lab == i) for i in range(k)]
            for degs in itertools.product(
                [(t, d) for t in inst.t_values for d in divisors(inst.N)], repeat=k
            ):
                per_stage = []
                for (t, _d), grp in zip(degs, groups):
                    choices = [[o.id for o in inst.node[v].options.get(t, ())] for v in grp]
                    per_stage.append([dict(zip(grp, pick)) for pick in itertools.product(*choices)])
                for picks in itertools.product(*per_stage):
                    yield Plan(
                        tuple(Stage(g, d, t, o) for g, (t, d), o in zip(groups, degs, picks))
                    )


def cli(*args, code=0, env=None):
    """Run the typer CLI on ``args`` (each through ``str``), assert its exit status is
    ``code``, and return the click result."""
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert result.exit_code == code, result.output
    return result


def cli_json(*args, code=0, env=None):
    """The JSON document that the CLI prints for ``args`` (run as by :func:`cli`)."""
    return json.loads(cli(*args, code=code, env=env).output)


def run_piper(*args, **kwargs) -> subprocess.CompletedProcess:
    """``python -m piper_cli ARGS`` in a child process (each argument through ``str``); the
    keyword arguments go to :func:`subprocess.run` (output captured as text unless given)."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run([sys.executable, "-m", "piper_cli", *map(str, args)], **kwargs)


def certify_stand_in(inst, answer_of, restrictions=Restrictions(), mode=DEFAULT_MODE):
    """:func:`certify` with a stand-in backend whose claim ``answer_of(form, values, ref)``
    makes from the brute-force optimum ``ref`` and its variable ``values``; the certified
    solution and ``ref``."""
    ref = solve_brute(inst, restrictions, mode=mode)
    form = formulate(index_sets(inst, restrictions, mode))
    values, why = form.values_of(ref.plan)
    assert values is not None, why
    sol = certify_fake(form, lambda sm, settings: answer_of(form, dict(values), ref))
    return sol, ref


def certify_fake(form, solve, hint=None, hint_values=None):
    """:func:`certify` of ``form`` with the stand-in backend ``solve(sm, settings)`` (no
    time limit, one thread), given ``hint`` and its ``hint_values`` if any."""
    return certify(
        form,
        "fake",
        solve,
        time_limit=None,
        threads=1,
        write_model=None,
        hint=hint,
        hint_values=hint_values,
        progress=False,
        info={},
    )


#: How long the process tests wait for a condition: far more than it takes even on a loaded
#: machine (a load of 26 on 2 cores made 5, 10 and 20 s too short); a bound on waiting, not
#: an assertion on speed.
PATIENCE = 300.0


def wait_until(condition, seconds: float = PATIENCE, interval: float = 0.05) -> bool:
    """Poll ``condition()`` until it is true (True) or ``seconds`` have passed (False)."""
    import time

    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(interval)
    return True


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path) -> int | None:
    """The process id a shell wrote to ``path`` (None until it is there in whole)."""
    try:
        text = open(path).read()
    except OSError:
        return None
    return int(text) if text.endswith("\n") and text.strip().isdigit() else None
