"""Self-contained HTML: one file, inline CSS and SVG, no CDN, no scripts fetched at view time."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from oomdoctor._version import __version__

_env = Environment(
    loader=PackageLoader("oomdoctor.render", "templates"),
    autoescape=select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_page(template: str, title: str, **context: Any) -> str:
    """Render templates/<template> (which extends base.html.j2) into a complete page."""
    return _env.get_template(template).render(title=title, tool_version=__version__, **context)
