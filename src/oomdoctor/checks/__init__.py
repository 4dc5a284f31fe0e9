"""Pure doctor checks: (FactSet) -> findings. Each check has a stable id and a page in docs/checks/."""
