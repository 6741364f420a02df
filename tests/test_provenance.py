"""benchmarks/provenance.py: a record from a dirty tree names what changed and a hash that tells two states apart."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def provenance():
    spec = importlib.util.spec_from_file_location("provenance", ROOT / "benchmarks" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def repository(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("outputs/\n")
    git("add", ".")
    git("commit", "-qm", "first")
    return tmp_path


def test_a_clean_tree_is_its_commit(provenance, repository):
    origin = provenance.provenance(repository)
    assert len(origin["commit"]) == 40 and origin["dirty"] == [] and "diff_sha256" not in origin
    assert provenance.describe(origin) == f"commit {origin['commit'][:10]}"


def test_a_dirty_tree_names_every_change_and_hashes_it(provenance, repository):
    (repository / "code.py").write_text("x = 2\n")
    first = provenance.provenance(repository)
    assert first["dirty"] == ["code.py"] and len(first["diff_sha256"]) == 64
    assert provenance.provenance(repository)["diff_sha256"] == first["diff_sha256"]  # the same state, the same hash

    (repository / "code.py").write_text("x = 3\n")
    assert provenance.provenance(repository)["diff_sha256"] != first["diff_sha256"]  # same paths, other content

    (repository / "code.py").write_text("x = 2\n")
    (repository / "new.py").write_text("y = 1\n")
    with_new = provenance.provenance(repository)
    assert with_new["dirty"] == ["code.py", "new.py"] and with_new["diff_sha256"] != first["diff_sha256"]
    (repository / "new.py").write_text("y = 2\n")
    assert provenance.provenance(repository)["diff_sha256"] != with_new["diff_sha256"]  # untracked content counts

    (repository / "new.py").unlink()
    (repository / "outputs").mkdir()
    (repository / "outputs" / "big.bin").write_bytes(b"\0" * 10)
    assert provenance.provenance(repository) == first  # ignored files are not part of the state
    assert provenance.describe(first) == (f"commit {first['commit'][:10]} with 1 changed paths "
                                          f"(diff {first['diff_sha256'][:12]})")
    assert provenance.describe({"commit": "abc", "dirty": "M x.py"}) == "commit abc with local changes"


def test_a_record_names_the_cpu_model_beside_the_count(provenance, monkeypatch, tmp_path):
    import os

    # a forward pass takes about twice as long on one CPU model as on another with as many cores
    assert provenance.cpus().startswith(f"{os.cpu_count()} CPUs (")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t\t: fpu\n")
    real_path = provenance.Path
    monkeypatch.setattr(provenance, "Path", lambda p: real_path(cpuinfo) if p == "/proc/cpuinfo" else real_path(p))
    assert provenance.cpus().endswith(", Example CPU 9000)")
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\nflags\t\t: fpu amx_bf16 amx_tile\n")
    assert provenance.cpus().endswith(", Example CPU 9000, AMX bf16)")  # the model name need not say it
