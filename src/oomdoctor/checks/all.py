"""Import every check module so the registry is complete (the engine and docsgen import this)."""

from oomdoctor.checks import (  # noqa: F401
    cuda,
    driver,
    driver_state,
    framework,
    processes,
    resources,
    runtime,
    sharing,
    storage,
    workload,
)
