"""Runtime layer: container engine, Kubernetes, NVIDIA Container Toolkit variables, device nodes.

Signals from environment-facts §5a: /.dockerenv (Docker), /run/.containerenv or container=podman
(Podman), KUBERNETES_SERVICE_HOST or a service-account directory (Kubernetes), and cgroup paths.
An unset variable is a fact with value None ("not set"), not an unavailable one.
"""

from __future__ import annotations

import re

from oomdoctor.collectors.context import CollectContext
from oomdoctor.facts import Fact, Unavailable
from oomdoctor.facts.base import Entry
from oomdoctor.redact import MASK

_ENV_FACTS = (
    ("runtime.nvidia_visible_devices", "NVIDIA_VISIBLE_DEVICES"),
    ("runtime.nvidia_driver_capabilities", "NVIDIA_DRIVER_CAPABILITIES"),
    ("runtime.nvidia_require_cuda", "NVIDIA_REQUIRE_CUDA"),
    ("runtime.nvidia_disable_require", "NVIDIA_DISABLE_REQUIRE"),
    ("runtime.cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),
)
_HYPERVISORS = re.compile(r"VMware|QEMU|KVM|Xen|innotek|VirtualBox|Microsoft Corporation|Amazon EC2|Google|"
                          r"OpenStack|Parallels|Bochs|Nutanix|Alibaba Cloud|Tencent Cloud", re.IGNORECASE)
SA_DIR = "var/run/secrets/kubernetes.io/serviceaccount"


def env_source(ctx: CollectContext) -> str:
    return ctx.label("proc/self/environ") if ctx.bundle else "environment"


def env_fact(ctx: CollectContext, key: str, value: object) -> Entry:
    """A fact read from the job's environment: unavailable when a bundle has no proc/self/environ."""
    if ctx.env_missing:
        return Unavailable(key, ctx.env_missing, env_source(ctx))
    return Fact(key, value, env_source(ctx))


def unproven(ctx: CollectContext, key: str, why: str) -> Unavailable:
    """No sign of a layer in a bundle without the environment: its absence is not proven.

    `oomdoctor bundle` always writes proc/self/environ, with the marker files beside it; a bundle
    without it was cut down or made by hand, so a missing marker says nothing either.
    """
    return Unavailable(key, f"{ctx.env_missing}; {why}", env_source(ctx))


def collect_runtime(ctx: CollectContext) -> list[Entry]:
    env = ctx.env
    src = env_source(ctx)
    out: list[Entry] = [env_fact(ctx, key, env.get(var)) for key, var in _ENV_FACTS]
    cgroup_text, _ = ctx.read_text("proc/self/cgroup")
    cgroup_text = cgroup_text or ""
    kube_env = "KUBERNETES_SERVICE_HOST" in env
    kube_sa = ctx.exists(SA_DIR)
    kube_cg = "kubepods" in cgroup_text
    kubernetes = kube_env or kube_sa or kube_cg
    why = [w for w, on in (("KUBERNETES_SERVICE_HOST set", kube_env), (f"/{SA_DIR} present", kube_sa),
                           ("kubepods in /proc/self/cgroup", kube_cg)) if on]
    if kubernetes or not ctx.env_missing:
        out.append(Fact("runtime.kubernetes", kubernetes, "; ".join(why) or src))
    else:
        out.append(unproven(ctx, "runtime.kubernetes", "KUBERNETES_SERVICE_HOST unknown, no other Kubernetes sign"))
    out.append(_container(ctx, kubernetes, cgroup_text))
    out.append(_dev_nodes(ctx))
    out.append(_hypervisor(ctx))
    # the context's environment is already redacted (live and bundle alike): list what was hidden
    out.append(env_fact(ctx, "runtime.env_redacted", sorted(k for k, v in env.items() if MASK in v)))
    return out


def _container(ctx: CollectContext, kubernetes: bool, cgroup_text: str) -> Entry:
    env = ctx.env
    if kubernetes:
        return Fact("runtime.container", "kubernetes", "Kubernetes signals")
    if ctx.exists("run/.containerenv") or env.get("container") == "podman" or "libpod" in cgroup_text:
        return Fact("runtime.container", "podman", ctx.label("run/.containerenv"))
    if ctx.exists(".dockerenv") or re.search(r"/docker[/-]", cgroup_text):
        return Fact("runtime.container", "docker", ctx.label(".dockerenv"))
    if env.get("container") or re.search(r"containerd|crio-|/lxc/", cgroup_text):
        return Fact("runtime.container", "container", "container env / cgroup path")
    if ctx.env_missing:
        return unproven(ctx, "runtime.container", "no container marker, but without the environment a missing marker proves nothing")
    return Fact("runtime.container", "none", "no container marker (/.dockerenv, /run/.containerenv, cgroup)")


def _dev_nodes(ctx: CollectContext) -> Entry:
    if ctx.bundle:
        text, why = ctx.read_text("dev/nvidia-nodes.txt")
        if text is None:
            return Unavailable("runtime.dev_nodes", why, ctx.label("dev/nvidia-nodes.txt"))
        names = [n.strip() for n in text.splitlines() if re.fullmatch(r"[A-Za-z0-9_.\-/]{1,64}", n.strip())]
        return Fact("runtime.dev_nodes", names, ctx.label("dev/nvidia-nodes.txt"))
    return Fact("runtime.dev_nodes", list_dev_nodes(ctx), "/dev")


def list_dev_nodes(ctx: CollectContext) -> list[str]:
    names = [n for n in (ctx.listdir("dev") or []) if n.startswith("nvidia")]
    caps = ctx.listdir("dev/nvidia-caps") if "nvidia-caps" in names else None
    if caps:
        names += [f"nvidia-caps/{c}" for c in caps]
    return sorted(n for n in names if n != "nvidia-caps")


def _hypervisor(ctx: CollectContext) -> Entry:
    vendor, why = ctx.read_text("sys/class/dmi/id/sys_vendor", limit=256)
    product, _ = ctx.read_text("sys/class/dmi/id/product_name", limit=256)
    src = ctx.label("sys/class/dmi/id/sys_vendor")
    if vendor is None and product is None:
        return Unavailable("runtime.hypervisor", f"no DMI information ({why})", src)
    text = f"{vendor or ''} {product or ''}"
    if _HYPERVISORS.search(text) and not re.search(r"Surface|Precision|ThinkPad", text):
        return Fact("runtime.hypervisor", {"vendor": (vendor or "").strip(), "product": (product or "").strip()}, src)
    return Fact("runtime.hypervisor", None, src)
