"""Renderers: (report data) -> str. They only format; no collection, no decisions."""
