"""GIVEN arbitrary text WHEN parsed as a manifest, compose file, docker run script or report stream THEN
the only failure is a one-line InputError, never a traceback."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomdoctor.checks.audit import audit
from oomdoctor.checks.audit.fix import fix_config
from oomdoctor.errors import InputError
from oomdoctor.parsers.config_file import parse_config
from oomdoctor.parsers.report_stream import iter_stream

FUZZ = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

_yaml_atoms = st.sampled_from([
    "apiVersion: v1\n", "kind: Pod\n", "kind: Deployment\n", "kind: List\n", "kind: PyTorchJob\n", "---\n",
    "spec:\n", "  template:\n", "    spec:\n", "  containers:\n", "  - name: t\n", "    image: x\n",
    "    args: [--num-workers=8]\n", "    resources: {limits: {nvidia.com/gpu: 1, memory: 1Gi}}\n",
    "    volumeMounts: [{name: s, mountPath: /dev/shm}]\n", "  volumes: [{name: s, emptyDir: {medium: Memory}}]\n",
    "services:\n", "  a:\n", "    shm_size: 1g\n", "    deploy: {resources: {reservations: {devices: [{count: x}]}}}\n",
    "items:\n", "- kind: Pod\n", "  spec: {containers: [{name: c, image: i}]}\n", "&a x: *a\n", "<<: *b\n",
    "{{ .Values.x }}\n", "key: [unclosed\n", "\t- tab\n", "? complex\n", "!!python/object:os.system x\n",
    "env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n", "# Source: c/templates/x.yaml\n", "...\n",
])


def _check(text: str, name: str) -> None:
    try:
        cfg = parse_config(text, name)
    except InputError as exc:
        assert "\n" not in exc.message and exc.message.startswith(name)
        return
    audit(cfg)
    fix_config(cfg)


@FUZZ
@given(st.lists(_yaml_atoms, max_size=25), st.sampled_from(["", "  ", "    "]))
def test_yaml_like_input_never_crashes(parts, indent):
    _check("".join(indent + p if i % 3 == 0 else p for i, p in enumerate(parts)), "f.yaml")


@FUZZ
@given(st.text(max_size=400))
def test_arbitrary_text_as_yaml(text):
    _check(text, "f.yml")


_docker_atoms = st.sampled_from([
    "docker run", " --gpus", " all", " '\"device=0,1\"'", " --shm-size", "=8g", " 64m", " -e", " X=1",
    " --ipc=host", " -it", " -m", " 8g", " img", " python train.py", " --num-workers 4", " \\\n", "\n", " &&",
    " '", '"', " #", " --mount type=tmpfs,destination=/dev/shm,tmpfs-size=1g", " --tmpfs /dev/shm:size=1g",
    " -e CUDA_VISIBLE_DEVICES=3", " podman run", " --runtime=nvidia", " -", " --", "$(", ")",
])


@FUZZ
@given(st.lists(_docker_atoms, max_size=30))
def test_docker_run_scripts_never_crash(parts):
    _check("#!/bin/sh\n" + "".join(parts), "run.sh")


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_script_text(text):
    _check("docker run " + text, "run.sh")


@FUZZ
@given(st.lists(st.sampled_from(["[pod/a/c] ", "[pod/b/c] ", "{", "}", '"layers": []', ",", "\n", "x", "[", "]",
                                 '{"layers": [], "host": {"name": "n"}}']), max_size=40))
def test_report_streams_never_crash(parts):
    for source, doc, error in iter_stream("".join(parts)):
        assert isinstance(source, str) and (doc is not None or error)
