"""Headless Chromium for the dashboard's browser tests, driven by Selenium with the system
`chromium` and `chromedriver` (Debian packages `chromium` and `chromium-driver`, which
./scripts/test installs when missing: scripts/_system_deps.sh). Selenium Manager is never used:
the driver path is given, so nothing is downloaded.

Missing Chromium, driver or selenium: the browser tests skip, or fail under CI=true like the
other test services.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

#: seconds a wait for the page (an element, a count) may take at most
WAIT_SECONDS = 5.0
CHROMIUM = ("chromium", "chromium-browser")
DRIVER = ("chromedriver",)


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
        )
        if found:
            return found
    return None


def chrome(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium WebDriver at `width` x `height` (skips the test when unavailable)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:  # pragma: no cover - the test extra installs it
        _unavailable("selenium is not installed (pip install -e .[test])")
    binary, driver = _find(CHROMIUM), _find(DRIVER)
    if binary is None or driver is None:
        _unavailable(
            "chromium and chromedriver are not installed (apt-get install chromium "
            "chromium-driver; ./scripts/test does it)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    browser.set_page_load_timeout(20)
    browser.set_script_timeout(10)
    return browser


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT_SECONDS, message: str = ""):
    """predicate() until it is truthy (polled every 50 ms); its value, or a failure."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(None, timeout, poll_frequency=0.05).until(
        lambda _: predicate(), message or "condition not met"
    )


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)
