"""Whatever is in a run directory, the report never raises (hypothesis)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.analysis import timeline
from oomdoctor.collectors import rundir
from oomdoctor.errors import InputError
from oomdoctor.render import record as render

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=20))
records = st.dictionaries(st.sampled_from(["kind", "t", "step", "allocated", "reserved", "rss", "rank",
                                           "inactive_split", "gpu_devices", "message", "label", "snapshot",
                                           "stats", "outside", "requested", "fatal", "source", "device_limit"]),
                          st.one_of(scalars, st.sampled_from(["step", "sample", "header", "oom", "exception", "final"]),
                                    st.dictionaries(st.sampled_from(["largest_live", "segments", "trace_peak", "nvml",
                                                                     "allocated_bytes.all.current"]),
                                                    st.one_of(scalars, st.lists(scalars, max_size=2)), max_size=3),
                                    st.lists(st.dictionaries(st.sampled_from(["used", "total"]), scalars),
                                             max_size=2)),
                          max_size=8)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(records.map(json.dumps), st.text(max_size=40)), max_size=30),
       evidence=st.one_of(st.binary(max_size=64), records.map(lambda r: json.dumps(r).encode())))
def test_report_never_raises(lines, evidence):
    with tempfile.TemporaryDirectory() as d:
        run = Path(d)
        (run / "timeline-rank0.jsonl").write_text("\n".join(lines), encoding="utf-8")
        (run / "oom-rank0-1.json").write_bytes(evidence)
        try:
            files = rundir.load(run)
        except InputError as exc:  # a binary timeline leaves nothing to read: one line, exit 2
            assert "not an oomdoctor run directory" in exc.message
            return
        doc = timeline.analyse(files)
        render.render_text(doc)
        render.render_json(doc)
        render.render_html(doc)
