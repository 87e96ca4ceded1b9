"""shoot(page, name): the web console's screenshots for the README, taken only when asked for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


def shoot(page: Any, name: str) -> None:
    """A screenshot of `page` to docs/ui/<name>.png when OLLAMA_PY_UI_SCREENSHOTS=1 (see the README)."""
    if os.environ.get("OLLAMA_PY_UI_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
