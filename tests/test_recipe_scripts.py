"""`python recipes/<name>.py` puts recipes/ first on the import path, where recipes/alfworld.py and recipes/minigrid.py
would stand in for the alfworld and minigrid packages: every recipe script takes its folder off the path first."""

import subprocess
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
# Loads each script as `python recipes/<name>.py` would (its folder first on the path), without running its main;
# the folder must be gone from the path afterwards. Then the packages a recipe file could stand in for are imported.
PROBE = """
import runpy, sys
from pathlib import Path

folder = Path(sys.argv[1])
for script in sys.argv[2:]:
    sys.path.insert(0, str(folder))
    runpy.run_path(script, run_name="recipe")
    assert all(Path(entry or ".").resolve() != folder for entry in sys.path), f"{script} leaves its folder on the path"
import starpo_alfworld.env, starpo_minigrid
import alfworld, minigrid
assert hasattr(alfworld, "__path__") and hasattr(minigrid, "__path__"), "a recipe file stands in for a package"
"""


def test_no_recipe_script_shadows_the_environment_packages():
    pytest.importorskip("starpo_alfworld", reason="the ALFWorld environment package is not installed")
    pytest.importorskip("starpo_minigrid", reason="the MiniGrid environment package is not installed")
    scripts = sorted(str(path) for path in RECIPES.glob("*.py"))
    assert len(scripts) >= 11
    result = subprocess.run([sys.executable, "-c", PROBE, str(RECIPES), *scripts], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
