"""CBC's log read for progress (incumbent and bound as the search goes), and CBC's own files
failing (a full disk, a file size limit): one line, a backend error, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import INPUTS, REPO

from piper_ilp.milp.cbc import progress_values, read_log_progress

# lines of a real CBC 2.10.3 log (a 10-node layered instance, 15 s), one of each kind (the
# root line's objective after the cuts changed to 36.6, so that it differs from before)
LOG = {
    "Continuous objective value is 36.5383 - 0.01 seconds": (None, 36.5383),
    "Cbc0038I Pass   4: suminf.    8.27596 (55) obj. 170.785 iterations 92": (None, None),
    "Cbc0031I 13 added rows had average density of 90": (None, None),
    "Cbc0013I At root node, 13 cuts changed objective from 36.53832 to 36.6 in 10 passes": (
        None,
        36.6,
    ),
    "Cbc0014I Cut generator 1 (Gomory) - 93 row cuts average 280.1 elements, 0 column cuts "
    "(0 active)  in 0.017 seconds - new frequency is 1": (None, None),
    "Cbc0010I After 0 nodes, 1 on tree, 1e+50 best solution, best possible 36.53832 (0.71 "
    "seconds)": (None, 36.53832),
    "Cbc0012I Integer solution of 304.32476 found by DiveCoefficient after 3044 iterations "
    "and 2 nodes (0.83 seconds)": (304.32476, None),
    "Cbc0016I Integer solution of 129.34032 found by strong branching after 12064 iterations "
    "and 62 nodes (1.76 seconds)": (129.34032, None),
    "Cbc0004I Integer solution of 125.77545 found after 12097 iterations and 63 nodes (1.76 "
    "seconds)": (125.77545, None),
    "Cbc0038I Full problem 757 rows 715 columns, reduced to 246 rows 168 columns": (None, None),
    "Cbc0010I After 1000 nodes, 175 on tree, 107.70586 best solution, best possible 36.53832 "
    "(5.96 seconds)": (107.70586, 36.53832),
}


@pytest.mark.parametrize("line", list(LOG))
def test_each_log_line_gives_its_incumbent_and_bound(line):
    # the node lines put the incumbent before "best solution" (the old pattern read none of
    # them); the cut generators' and the pump's lines give nothing
    assert progress_values(line) == LOG[line]


def test_a_line_still_being_written_is_left_for_the_next_read():
    text = "".join(line + "\n" for line in LOG)
    used, incumbent, bound = read_log_progress(text + "Cbc0012I Integer solution of 27")
    assert used == len(text) and (incumbent, bound) == (107.70586, 36.53832)
    assert read_log_progress("Cbc0012I Integer solution of 27") == (0, None, None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE, SIGXFSZ")
def test_cbc_files_that_cannot_be_written_are_a_one_line_backend_error():
    # a file size limit (as a full disk would) while the model file is written in CBC's
    # private folder: a traceback before
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        f"sys.argv = ['piper-ilp', 'solve', {str(INPUTS / 'small.json')!r}, '--method', 'cbc']\n"
        "from piper_cli.entry import main\nmain()\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("piper-ilp: internal error: cbc: could not run: File too large ("), line
