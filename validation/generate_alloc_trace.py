"""Why is generate's peak reserved higher on the GPU than in the estimate while peak allocated agrees?

Records the caching allocator's own event ring (alloc / free_completed / segment_alloc / segment_free,
sizes, streams; no stacks) for one measured step of the named LLM-zoo configurations, exactly as
validation/estimate_llm_zoo.py measures them (build on the GPU, StepRunner), and writes it out so the
estimator's allocator model can be replayed on the real request sequence (does the model reproduce the
real reserved peak? then the traced requests differ; if not, the model does).

    PYTHONPATH=src python3 validation/generate_alloc_trace.py --out $OUT llama1b-generate gemma2b-generate
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args()
    import estimate_llm_zoo as zoo
    import torch

    from oomdoctor.estimate.hf import make_build
    from oomdoctor.workload.load import WorkloadSpec
    from oomdoctor.workload.step import StepRunner

    torch.cuda.init()
    out = {}
    for name in args.names:
        _, shape, batch, fields = next(z for z in zoo.ZOO if z[0] == name)
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
        build = make_build(zoo._config(shape), zoo._recipe(fields))
        with torch.device("cuda"):
            spec = WorkloadSpec.from_dict(build(batch), name)
        runner = StepRunner(spec, "cuda")
        steps = zoo.measure_steps(torch, runner, steps=2)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = [[e["action"], int(e["addr"]), int(e["size"]), int(e.get("stream", 0))] for e in snap["device_traces"][0]]
        out[name] = {"steps": steps, "events": events, "segments_at_end": sorted(int(s["total_size"]) for s in snap["segments"])}
        print(name, steps, len(events), "events", flush=True)
        del runner, spec, build
        import gc
        gc.collect()
    with gzip.open(Path(args.out) / "generate_alloc_trace.json.gz", "wt") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
