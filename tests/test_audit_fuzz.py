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


def _manifest(ind: int, seq_off: int, containers_flow: bool, volumes: str, res_flow: bool, extra_mount: bool) -> str:
    p = " " * ind
    dash = " " * seq_off

    def block_seq(items: list[str], base: str) -> str:
        return "".join(f"{base}{dash}- {it}\n" for it in items)

    res = ("resources: {limits: {memory: 64Gi, nvidia.com/gpu: 2}, requests: {nvidia.com/gpu: 1}}"
           if res_flow or containers_flow else None)
    if containers_flow:
        c = "{name: t, image: nvcr.io/nvidia/pytorch:24.05-py3, args: [--num-workers=4]" + (f", {res}" if res else "") + "}"
        containers = f"{p}containers: [{c}]\n"
    else:
        body = f"{p}{dash}  image: nvcr.io/nvidia/pytorch:24.05-py3  # the image\n{p}{dash}  args: [--num-workers=4]\n"
        if res:
            body += f"{p}{dash}  {res}\n"
        else:
            body += (f"{p}{dash}  resources:\n{p}{dash}  {p}limits:\n{p}{dash}  {p}{p}memory: 64Gi\n"
                     f"{p}{dash}  {p}{p}nvidia.com/gpu: 2\n{p}{dash}  {p}requests:\n{p}{dash}  {p}{p}nvidia.com/gpu: 1\n")
        if extra_mount:
            body += f"{p}{dash}  volumeMounts:\n" + block_seq(["name: data", "  mountPath: /data"], f"{p}{dash}  ")[:-1] + "\n"
        containers = f"{p}containers:\n{p}{dash}- name: t\n" + body
    vols = {"none": "", "flow": f"{p}volumes: []\n",
            "block": f"{p}volumes:\n{p}{dash}- name: data\n{p}{dash}  persistentVolumeClaim: {{claimName: d}}\n"}[volumes]
    return f"apiVersion: v1\nkind: Pod\nmetadata:\n{p}name: p\nspec:\n{containers}{vols}"


@FUZZ
@given(st.sampled_from([2, 4]), st.sampled_from([0, 2]), st.booleans(), st.sampled_from(["none", "flow", "block"]),
       st.booleans(), st.booleans())
def test_fix_works_on_every_yaml_style(ind, seq_off, cflow, volumes, rflow, extra):
    text = _manifest(ind, seq_off, cflow, volumes, rflow, extra)
    cfg = parse_config(text, "p.yaml")
    assert {a.finding.id for a in audit(cfg)} >= {"AUD001", "AUD007"}
    result = fix_config(cfg)
    assert not result.skipped
    fixed = parse_config(result.text, "p.yaml")  # still YAML, same workload
    assert not {a.finding.id for a in audit(fixed)} & {"AUD001", "AUD007"}
    kept = [ln for ln in text.splitlines() if "nvidia.com/gpu: 1" not in ln and "volumes: []" not in ln]
    new_lines = result.text.splitlines()
    assert all(ln in new_lines for ln in kept if not cflow and not rflow)
