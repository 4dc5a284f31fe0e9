"""Bench: `oomdoctor audit` on hostile scripts. Two kinds of shape, parsed and audited in-process, best of
`--runs`; the seconds per 1,000 (of N) should stay flat as N grows (linear). Prints a table.

- files of N lines `docker run ...` (`many.sh`, and `many.sbatch` whose #SBATCH options bound every container);
- one logical line holding N commands (`--line-sizes`): N physical lines joined by backslash continuations and
  `&&` (`chained`) or `;` (`semicolons`), N commands on one physical line (`one-line`), N commands inside one
  `bash -lc "..."` string (`in-string`), N commands each an argument of the one before (`nested`: continued
  lines, no operator), one command with N continued option lines (`options`); one command whose last word is
  100*N characters (`long-word`), or after a path word `/a/a/...` of 100*N characters (`path-word`);
  a Slurm batch script with 10*N blank lines (`sbatch-blank`) or an #SBATCH word of 100*N characters
  (`sbatch-word`).
  `--fix` also times the patch.

    PYTHONPATH=src python bench/audit_hostile.py [--sizes 10000,20000,40000] [--line-sizes 500,1000,2000,4000]
        [--shapes chained,one-line] [--runs 3] [--fix]
"""

from __future__ import annotations

import argparse
import time

from oomdoctor.checks.audit import audit
from oomdoctor.checks.audit.fix import fix_config
from oomdoctor.parsers.config_file import parse_config

LINE = "docker run --gpus all -m 4g img python t.py\n"
KINDS = {
    "many.sh": "#!/bin/bash\n",
    "many.sbatch": "#!/bin/bash\n#SBATCH --mem=64G\n#SBATCH --gres=gpu:1\n",
}
RUN = "docker run --gpus all img python t.py"
SHAPES = {
    "chained": lambda n: "#!/bin/bash\n" + f"{RUN} \\\n&& " * (n - 1) + RUN + "\n",
    "semicolons": lambda n: "#!/bin/bash\n" + f"{RUN} ; \\\n" * (n - 1) + RUN + "\n",
    "one-line": lambda n: "#!/bin/bash\n" + f"{RUN}; " * n + "\n",
    "in-string": lambda n: '#!/bin/bash\nbash -lc "' + f"{RUN}; " * n + '"\n',
    "nested": lambda n: "#!/bin/bash\n" + f"{RUN} \\\n" * (n - 1) + RUN + "\n",
    "options": lambda n: "#!/bin/bash\ndocker run --gpus all \\\n" + "  -e X=1 \\\n" * (n - 2) + "  img python t.py\n",
    "long-word": lambda n: f"#!/bin/bash\n{RUN} " + "a" * (100 * n) + "\n",
    "path-word": lambda n: "#!/bin/bash\n" + "/a" * (50 * n) + f" {RUN}\n",
    "sbatch-blank": lambda n: "#!/bin/bash\n#SBATCH --mem=8G\nexport W=8\n" + "\n" * (10 * n) + "python t.py\n",
    "sbatch-word": lambda n: "#!/bin/bash\n#SBATCH --comment=" + "a" * (100 * n) + " --mem=8G\npython t.py\n",
}


def _time(text: str, name: str, runs: int, fix: bool) -> tuple[float, float, int, int]:
    best, best_fix, found, commands = float("inf"), float("inf"), 0, 0
    for _ in range(runs):
        t0 = time.perf_counter()
        cfg = parse_config(text, name)
        found, commands = len(audit(cfg)), len(cfg.workloads)
        best = min(best, time.perf_counter() - t0)
        if fix:
            t0 = time.perf_counter()
            fix_config(cfg)
            best_fix = min(best_fix, time.perf_counter() - t0)
    return best, best_fix, found, commands


def _row(name: str, n: int, text: str, args) -> None:
    secs, fix_secs, found, commands = _time(text, name, args.runs, args.fix)
    fix = f"{fix_secs:>8.2f}" if args.fix else f"{'-':>8}"
    print(f"{name:<12} {n:>7} {text.count(chr(10)):>7} {len(text) / 2**20:>6.2f} {secs:>8.2f} "
          f"{secs / n * 1000:>10.3f} {fix} {commands:>8} {found:>9}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,20000,40000", help="N for the many-lines files ('' skips them)")
    ap.add_argument("--line-sizes", default="500,1000,2000,4000", help="N for the one-logical-line shapes")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="which one-logical-line shapes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fix", action="store_true", help="also time `--fix` (fix_config)")
    args = ap.parse_args()
    print(f"{'file/shape':<12} {'N':>7} {'lines':>7} {'MiB':>6} {'seconds':>8} {'s/1k N':>10} {'fix s':>8} "
          f"{'commands':>8} {'findings':>9}")
    for name, head in KINDS.items():
        for n in (int(s) for s in args.sizes.split(",") if s):
            _row(name, n, head + LINE * n, args)
    for shape in (s for s in args.shapes.split(",") if s):
        for n in (int(s) for s in args.line_sizes.split(",") if s):
            _row(shape, n, SHAPES[shape](n), args)


if __name__ == "__main__":
    main()
