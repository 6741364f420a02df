"""The public import paths: every name ``trl_starpo`` and its packages export, and every ``trl_starpo`` path the
documentation, the environment cards and the recipes name, imports.

Modules move (``trl_starpo.plotting`` became ``trl_starpo.display.plotting``); a move that breaks a documented path
fails here rather than in a user's script.
"""

import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

import trl_starpo

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["trl_starpo.algorithms", "trl_starpo.display", "trl_starpo.envs", "trl_starpo.envs.adapters",
            "trl_starpo.hub", "trl_starpo.monitor", "trl_starpo.rollout"]
NOT_A_MODULE = {"trl_starpo.environments"}  # the entry-point group environment packages register under


def documents() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "recipes").rglob("*.py")]
    for suffix in ("*.md", "*.py"):
        files += (ROOT / "environments").rglob(suffix)
    return sorted(files)


def documented_names() -> dict[str, set[str]]:
    """Every dotted ``trl_starpo`` path the documents name (``from trl_starpo.x import a, b`` gives
    ``trl_starpo.x.a`` and ``trl_starpo.x.b``), with the files naming it."""
    found: dict[str, set[str]] = {}
    for path in documents():
        text = path.read_text(encoding="utf-8")
        names = set(re.findall(r"\btrl_starpo(?:\.[A-Za-z_]\w*)+", text))
        pattern = r"^\s*from (trl_starpo(?:\.\w+)*) import (?:\(([^)]*)\)|([\w, ]+))"
        for module, parenthesized, imported in re.findall(pattern, text, re.M):
            for name in re.sub(r"#.*", "", parenthesized or imported).split(","):
                if name.strip():
                    names.add(f"{module}.{name.split(' as ')[0].strip()}")
        for name in names - NOT_A_MODULE:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def resolve(dotted: str):
    """Import the longest module prefix of ``dotted`` and look the rest up as attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        try:
            value = import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:  # a missing parent package, or a module whose own imports fail
                raise
            continue
        for attribute in parts[end:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("name", trl_starpo.__all__)
def test_every_top_level_name_imports(name):
    assert getattr(trl_starpo, name) is not None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_exports_what_its_all_lists(package):
    module = import_module(package)
    for name in getattr(module, "__all__", []):
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_every_trl_starpo_path_the_docs_name_imports():
    names = documented_names()
    # The scan finds what the docs use; these are the package-level paths a newcomer reads first.
    for expected in ("trl_starpo.monitor", "trl_starpo.hub.push_trajectories_to_hub", "trl_starpo.display.plotting.plot_run",
                     "trl_starpo.display.html_export.write_store_html", "trl_starpo.monitor.detectors",
                     "trl_starpo.monitor.diagnostics", "trl_starpo.hub.cards.model_card", "trl_starpo.evaluation.evaluate",
                     "trl_starpo.store.TrajectoryStore", "trl_starpo.envs.adapters.GymnasiumAdapter"):
        assert expected in names, expected
    broken = {}
    for name, files in sorted(names.items()):
        try:
            resolve(name)
        except (ImportError, AttributeError) as error:
            broken[name] = f"{', '.join(sorted(files))}: {type(error).__name__}: {error}"
    assert not broken, "documented paths that do not import:\n" + "\n".join(f"{k} ({v})" for k, v in broken.items())


def test_the_collector_does_not_import_evaluation():
    """evaluation.py plays episodes with the collector; the collector must not need evaluation back (the import
    cycle that RolloutSettings' move to trl_starpo.rollout.settings broke)."""
    code = ("import sys, trl_starpo.rollout.collector as c; "
            "print(c.RolloutCollector.__name__, 'trl_starpo.evaluation' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["RolloutCollector", "False"], done.stdout


def test_hub_kernels_stay_off_unless_asked_for():
    # transformers fetches and runs Hub kernels on a GPU unless told not to: code from the Hub, and an error offline
    import os
    import subprocess
    import sys

    code = "import os, trl_starpo; print(os.environ['USE_HUB_KERNELS'])"
    environment = {k: v for k, v in os.environ.items() if k != "USE_HUB_KERNELS"}
    for preset, expected in ((None, "NO"), ("YES", "YES")):
        env = environment if preset is None else {**environment, "USE_HUB_KERNELS": preset}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0 and done.stdout.split() == [expected], done.stderr
