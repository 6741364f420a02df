"""Pushing agents and trajectories: the exact files and cards sent, through huggingface_hub's real client with
its HTTP layer answered by a fake Hub (tests/mock_hub.py)."""

import ast
import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from mock_hub import fake_hub
from starpo_testenv import NAME, install_counter_env
from test_store import make_trajectory

from trl_starpo.hub.cards import AgentRecord, dataset_card, model_card, play_snippet
from trl_starpo.hub import push_agent
from trl_starpo.store import TrajectoryStore, from_dataset

VALIDATION = {"split": "validation", "episodes": 32, "temperature": 1.0,
              "before": {"success": 0.125, "return": -0.05, "turns": 2.5, "format_error_rate": 0.4},
              "after": {"success": 0.625, "return": 0.55, "turns": 1.75, "format_error_rate": 0.05}}


def front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def rendered(card: str) -> str:
    """The card's Markdown body as HTML, as a CommonMark renderer with tables shows it."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(card.split("---\n", 2)[2])


def png_size(data: bytes):
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    return image.size


@pytest.fixture
def checkpoint(tmp_path, tiny_model_dir):
    """A checkpoint folder as training leaves it: weights, tokenizer, optimizer state, pickles, store, record."""
    import shutil

    folder = tmp_path / "checkpoint-4"
    shutil.copytree(tiny_model_dir, folder)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        (folder / name).write_bytes(b"not for the hub")
    history = [{"step": s, "rollout/success": s / 4, "rollout/return": s / 8, "rollout/group_return_std": 0.3,
                "entropy": 2.0 - s / 10, "grad_norm": 1.0 / s, "loss": 0.1} for s in range(1, 5)]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4, "log_history": history}))
    AgentRecord(environments=[NAME], base_model="HuggingFaceTB/SmolLM2-135M-Instruct", preset="starpo-s",
                rollout={"max_turns": 3}, training={"preset": "starpo-s", "learning_rate": 1e-5},
                validation=VALIDATION, global_step=4).save(folder)
    store = TrajectoryStore()
    for step in range(1, 5):
        store.add([make_trajectory(i) for i in range(4)], step=step, environment=NAME)
    store.save(folder / "trajectories")
    return folder


def test_push_agent_sends_the_agent_card_curves_and_trajectories(monkeypatch, checkpoint):
    with fake_hub(monkeypatch) as hub:
        urls = push_agent(checkpoint, "user/counter-agent", token="hf_fake_token")
    assert urls == {"model": "https://huggingface.co/user/counter-agent",
                    "trajectories": "https://huggingface.co/datasets/user/counter-agent-trajectories"}
    assert [c["type"] if "type" in c else "model" for c in hub.created] == ["model", "dataset"]
    # Every request of the push carries the token (huggingface_hub's own agent detection asks anonymously).
    assert {auth for path, auth in hub.authorization if path != "/api/agent-harnesses"} == {"Bearer hf_fake_token"}
    # huggingface_hub asks /api/agent-harnesses once per process, so only if no earlier test reached the Hub client.
    assert {path for path, _ in hub.authorization} - {"/api/agent-harnesses"} == {
        "/api/repos/create", "/api/validate-yaml",
        "/api/models/user/counter-agent/preupload/main", "/api/models/user/counter-agent/commit/main",
        "/api/datasets/user/counter-agent-trajectories/preupload/main",
        "/api/datasets/user/counter-agent-trajectories/commit/main",
    }
    assert len(hub.validated) == 2  # both READMEs went through the Hub's YAML validation

    model = hub.commit("user/counter-agent")
    assert model.repo_type == "model" and model.revision == "main" and model.summary == "Upload StarPO agent"
    local = {p.name for p in checkpoint.iterdir() if p.is_file()}
    assert set(model.files) == (local - {"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"}) | {
        "README.md", "learning_curves.png"}
    for name in local & set(model.files) - {"starpo_agent.json"}:
        assert model.files[name] == (checkpoint / name).read_bytes(), name
    assert png_size(model.files["learning_curves.png"]) == (1200, 650)
    sent_record = json.loads(model.files["starpo_agent.json"])
    assert sent_record["trajectories_repo"] == "user/counter-agent-trajectories"

    card = model.files["README.md"].decode()
    meta = front_matter(card)
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert {"trl", "starpo", "agent", f"env:{NAME}"} <= set(meta["tags"])
    assert meta["datasets"] == ["user/counter-agent-trajectories"]
    assert f"for the **{NAME}** environment" in card
    assert "On the `validation` split (32 episodes, sampling temperature 1.0; the interval is the 95% Wilson" in card
    assert "| before training | 0.125 | 0.050–0.281 | -0.050 | 2.50 | 0.400 |" in card  # 95% Wilson intervals
    assert "| after training | 0.625 | 0.453–0.771 | 0.550 | 1.75 | 0.050 |" in card
    assert "![Learning curves" in card and "(learning_curves.png)" in card
    assert "- Preset: `starpo-s`" in card and "| `learning_rate` | `1e-05` |" in card
    assert play_snippet("user/counter-agent", NAME) in card
    assert f"trl-starpo eval --env {NAME} --model user/counter-agent" in card

    data = hub.commit("user/counter-agent-trajectories")
    assert data.repo_type == "dataset" and set(data.files) == {"README.md", "data/train-00000-of-00001.parquet"}
    dcard = data.files["README.md"].decode()
    dmeta = front_matter(dcard)
    assert dmeta["configs"][0]["data_files"][0] == {"split": "train", "path": "data/train-*.parquet"}
    assert f"- Environments: `{NAME}`" in dcard and "- Preset: `starpo-s`" in dcard
    assert "- Model: [user/counter-agent](https://huggingface.co/user/counter-agent)" in dcard
    assert "- Trajectories: 16 (of 16 logged; the store keeps the latest 10000), steps 1–4" in dcard
    assert "- Success: 0.500" in dcard and f"| `{NAME}` | 16 | 0.500 | 0.280–0.720 |" in dcard
    import pyarrow.parquet as pq
    from datasets import Dataset

    table = pq.read_table(io.BytesIO(data.files["data/train-00000-of-00001.parquet"]))
    stored = TrajectoryStore.load(checkpoint / "trajectories").trajectories()
    assert from_dataset(Dataset(table)) == stored


def test_lora_adapters_push_as_adapters(monkeypatch, tmp_path, tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained(tmp_path / "adapter")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "adapter")
    AgentRecord(environments=[NAME], base_model="HuggingFaceTB/SmolLM2-135M-Instruct").save(tmp_path / "adapter")
    with fake_hub(monkeypatch) as hub:
        urls = push_agent(tmp_path / "adapter", "user/lora-agent", token="hf_fake_token")
    assert list(urls) == ["model"]  # no store, no dataset repository
    files = hub.commit("user/lora-agent").files
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(files) and "model.safetensors" not in files
    meta = front_matter(files["README.md"].decode())
    assert meta["library_name"] == "peft" and meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "a LoRA adapter on [HuggingFaceTB/SmolLM2-135M-Instruct]" in files["README.md"].decode()
    assert "Validation success was not measured" in files["README.md"].decode()


def test_push_refuses_a_folder_without_weights_before_creating_anything(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with fake_hub(monkeypatch) as hub, pytest.raises(ValueError, match="no safetensors weights"):
        push_agent(tmp_path, "user/x", token="hf_fake_token")
    assert hub.created == [] and hub.requests == []  # no empty repository left behind


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda folder: (folder / "starpo_agent.json").write_text("{not json"), "not a readable agent record"),
        (lambda folder: (folder / "starpo_agent.json").write_text("[1, 2]"), "not a readable agent record"),
        (lambda folder: (folder / "trainer_state.json").write_text('{"global_step": 4}'),
         "not a readable trainer state: KeyError"),
        (lambda folder: (folder / "trajectories" / "CURRENT").write_text("v-missing"), "not a readable trajectory store"),
    ],
)
def test_push_checks_metadata_before_creating_anything(monkeypatch, checkpoint, damage, message):
    (checkpoint / "learning_curves.png").unlink(missing_ok=True)  # the curves are drawn from trainer_state.json
    damage(checkpoint)
    with fake_hub(monkeypatch) as hub, pytest.raises(ValueError, match=message):
        push_agent(checkpoint, "user/x", token="hf_fake_token")
    assert hub.requests == []


def test_push_needs_the_owner_in_the_repository_id(monkeypatch, checkpoint):
    with fake_hub(monkeypatch) as hub, pytest.raises(ValueError, match="'USER/x' or 'ORG/x'"):
        push_agent(checkpoint, "x", token="hf_fake_token")
    assert hub.requests == []


def test_cli_push_offline_is_one_line(monkeypatch, checkpoint, capsys):
    from huggingface_hub import constants

    from trl_starpo.cli import main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["push", str(checkpoint), "--repo-id", "user/x", "--token", "hf_fake_token"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-starpo push: error: HF_HUB_OFFLINE is set: pushing needs the Hub.")
    assert len(err.strip().splitlines()) == 1


def test_cli_push_refused_by_the_hub_is_one_line(monkeypatch, checkpoint, capsys):
    import httpx2

    from trl_starpo.cli import main

    with fake_hub(monkeypatch) as hub:
        hub.handle = lambda request: httpx2.Response(401, json={"error": "Invalid credentials in Authorization header"})
        assert main(["push", str(checkpoint), "--repo-id", "user/x", "--token", "hf_bad_token"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("trl-starpo push: error: the Hub refused or could not be reached: ") and "401" in line


def test_cli_push(monkeypatch, checkpoint, capsys):
    from trl_starpo.cli import main

    with fake_hub(monkeypatch) as hub:
        code = main(["push", str(checkpoint), "--repo-id", "user/cli-agent", "--trajectories-repo-id",
                     "user/cli-trajectories", "--token", "hf_fake_token"])
    assert code == 0
    assert {c.repo_id for c in hub.commits} == {"user/cli-agent", "user/cli-trajectories"}
    out = capsys.readouterr().out
    assert "model: https://huggingface.co/user/cli-agent" in out


HOSTILE = 'x"); import os; os.system("id"); ("<script>alert(1)</script>\n# pwned $(id) `id`'


def test_a_hostile_environment_name_is_refused_and_hostile_fields_stay_inert():
    with pytest.raises(ValueError, match="not a plain name"):
        model_card(AgentRecord(environments=[HOSTILE]), repo_id="me/agent")
    with pytest.raises(ValueError, match="not a plain name"):
        dataset_card({"environments": {HOSTILE: {}}}, repo_id="me/t")
    # Every other field of starpo_agent.json, and the folder name, can hold anything: nothing of it becomes
    # Markdown structure, HTML, code or a shell word.
    record = AgentRecord(environments=["sokoban"], base_model=HOSTILE, preset=HOSTILE, training={HOSTILE: HOSTILE},
                         rollout={"max_turns": HOSTILE}, trl_starpo_version=HOSTILE,
                         validation={"split": HOSTILE, "episodes": HOSTILE, "temperature": HOSTILE,
                                     "before": {"success": HOSTILE}}, trajectories_repo=HOSTILE)
    folder = "out/" + HOSTILE.replace("\n", " ")
    with pytest.raises(ValueError, match="control characters"):
        model_card(record, repo_id="out/" + HOSTILE)  # a newline would end the command's line
    card = model_card(record, repo_id=folder)
    assert {"base_model", "datasets"}.isdisjoint(front_matter(card))  # not Hub ids: no metadata links
    page = rendered(card)
    assert "<script" not in page and "<img src=\"x" not in page
    assert re.findall(r"<h2>(.*?)</h2>", page) == ["Results", "Play one episode", "Training", "Framework versions",
                                                   "Citation"] and page.count("<h1>") == 1
    assert set(re.findall(r'href="(.*?)"', page)) == {"https://arxiv.org/abs/2504.20073",
                                                     "https://github.com/huggingface/trl"}
    python = card.split("```python\n")[1].split("```")[0]
    calls = {type(node.func).__name__ + ":" + getattr(node.func, "id", getattr(node.func, "attr", ""))
             for node in ast.walk(ast.parse(python)) if isinstance(node, ast.Call)}
    assert calls == {"Name:make_policy", "Name:dict", "Name:load_tasks", "Name:play_model", "Name:print"}
    bash = card.split("Or in a terminal")[1].split("```bash\n")[1].split("```")[0]
    for line in bash.strip().splitlines():
        words = shlex.split(line)
        assert words[:5] in (["trl-starpo", "play", "--env", "sokoban", "--model"],
                             ["trl-starpo", "eval", "--env", "sokoban", "--model"]) and words[5] == folder
    page = rendered(dataset_card({"environments": {}}, repo_id="me/t", record=record))
    assert "<script" not in page and re.findall(r"<h2>(.*?)</h2>", page) == ["Use", "Schema", "Citation"]


def test_cards_without_results_or_store():
    card = model_card(AgentRecord(environments=["sokoban"], base_model="/local/model"), repo_id="me/agent",
                      plot_file=None)
    meta = front_matter(card)
    assert "base_model" not in meta and "datasets" not in meta  # a local base model is not a Hub link
    assert "`/local/model`" in card and "learning_curves.png" not in card
    dcard = dataset_card(TrajectoryStore().summary(), repo_id="me/t")
    assert "- Trajectories: 0" in dcard


def test_trainer_push_to_hub_sends_the_agent_with_its_validation(monkeypatch, tmp_path, tiny_agent_dir):
    from conftest import CounterEnv
    from test_trainer import counter_tasks, make_args

    from trl_starpo import StarPOTrainer
    from trl_starpo.monitor.callbacks import attach_agent_callbacks

    with fake_hub(monkeypatch) as hub:
        args = make_args(tmp_path / "run", max_steps=1, max_turns=2, push_to_hub=True,
                         hub_model_id="user/trainer-agent", hub_token="hf_fake_token")
        trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
        record = attach_agent_callbacks(trainer, environment="counter", base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
                                        preset="starpo", progress=False)
        trainer.train()
        record.validation = VALIDATION
        trainer.push_to_hub()
    assert hub.created[0]["name"] == "trainer-agent"  # init_hf_repo at construction
    model = hub.commit("user/trainer-agent")
    assert "model.safetensors" in model.files and "learning_curves.png" in model.files
    assert not [f for f in model.files if f.startswith(("trajectories/", "checkpoint-")) or f.endswith((".bin", ".pt"))]
    card = model.files["README.md"].decode()
    assert "| after training | 0.625 |" in card and "- Preset: `starpo`" in card and "- Optimizer steps: 1" in card
    assert front_matter(card)["datasets"] == ["user/trainer-agent-trajectories"]
    import pyarrow.parquet as pq

    data = hub.commit("user/trainer-agent-trajectories")
    table = pq.read_table(io.BytesIO(data.files["data/train-00000-of-00001.parquet"]))
    assert table.num_rows == 4 and table.column("step").to_pylist() == [1] * 4  # one step of 4 rollouts


@pytest.mark.slow
def test_the_card_snippet_plays_an_episode(tmp_path, tiny_agent_dir):
    env_path = install_counter_env(tmp_path / "envpkg")
    snippet = play_snippet(tiny_agent_dir, NAME)
    env = {**os.environ, "PYTHONPATH": str(env_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "--- turn 1 ---" in done.stdout and "episode:" in done.stdout
    assert done.stdout.strip().splitlines()[-1].split()[0] in ("True", "False")


def test_push_tasks_maps_every_split_by_its_own_name(monkeypatch, tmp_path, capsys):
    from datasets import load_dataset

    import trl_starpo
    from trl_starpo.cli import main

    with fake_hub(monkeypatch) as hub:
        assert main(["push-tasks", "--env", "alfworld", "--repo-id", "user/alfworld-tasks"]) == 0
    assert capsys.readouterr().out.strip() == "https://huggingface.co/datasets/user/alfworld-tasks"
    commit = hub.commit("user/alfworld-tasks")
    assert commit.repo_type == "dataset" and commit.summary == "Upload StarPO environment tasks"
    assert set(commit.files) == {"README.md", "data/train-00000-of-00001.parquet",
                                 "data/valid_seen-00000-of-00001.parquet", "data/valid_unseen-00000-of-00001.parquet"}
    card = commit.files["README.md"].decode()
    assert front_matter(card)["configs"] == [{"config_name": "default", "data_files": [
        {"split": split, "path": f"data/{split}-00000-of-00001.parquet"} for split in ("train", "valid_seen", "valid_unseen")]}]
    assert "env:alfworld" in front_matter(card)["tags"] and "--tasks user/alfworld-tasks" in card
    # What arrived is a dataset repository: load it as datasets would, from a copy of its files.
    for path, content in commit.files.items():
        (tmp_path / "repo" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / path).write_bytes(content)
    pushed = load_dataset(str(tmp_path / "repo"), cache_dir=str(tmp_path / "cache"))
    shipped = trl_starpo.load_tasks("alfworld")
    assert {s: len(rows) for s, rows in pushed.items()} == {"train": 300, "valid_seen": 60, "valid_unseen": 60}
    assert pushed["valid_unseen"].to_list() == shipped["valid_unseen"].to_list()
    assert trl_starpo.load_tasks("alfworld", "test", source=str(tmp_path / "repo"))[0] == shipped["valid_unseen"][0]


def test_push_tasks_refuses_an_unknown_environment(monkeypatch, capsys):
    from trl_starpo.cli import main

    with fake_hub(monkeypatch) as hub:
        assert main(["push-tasks", "--env", "chess", "--repo-id", "user/chess"]) == 2
    assert "Unknown environment 'chess'" in capsys.readouterr().err and not hub.requests


@pytest.mark.parametrize("environment, split", [("alfworld", "valid_seen"), ("sokoban", "validation")])
def test_a_card_installs_from_the_source_tree_and_evaluates_on_a_split_the_environment_has(environment, split):
    from trl_starpo.hub.cards import AgentRecord, model_card

    card = model_card(AgentRecord(environments=[environment]), repo_id="me/agent")
    assert f"pip install -e trl_starpo -e trl_starpo/environments/{environment}   # in the folder" in card
    assert "pip install trl-starpo" not in card
    assert f"trl-starpo eval --env {environment} --model me/agent --split {split} --episodes 64" in card
    assert f'load_tasks("{environment}", "{split}")' in card


def test_a_dry_run_writes_what_the_push_would_send_and_sends_nothing(monkeypatch, checkpoint, tmp_path, capsys):
    from trl_starpo.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a dry run needs no Hub: it is also the offline preview
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    preview = tmp_path / "preview"
    assert main(["push", str(checkpoint), "--repo_id", "user/counter-agent", "--dry-run", str(preview)]) == 0
    model, data = preview / "user--counter-agent", preview / "user--counter-agent-trajectories"
    assert capsys.readouterr().out.split() == ["model:", str(model), "trajectories:", str(data)]
    listing = json.loads((model / "files.json").read_text())
    assert listing["model.safetensors"] == (checkpoint / "model.safetensors").stat().st_size
    assert "optimizer.pt" not in listing and not (model / "model.safetensors").exists()  # listed, not copied
    card = (model / "README.md").read_text()
    assert listing["README.md"] == len(card.encode()) and "user/counter-agent-trajectories" in card
    assert json.loads((model / "starpo_agent.json").read_text())["trajectories_repo"] == "user/counter-agent-trajectories"
    assert (data / "README.md").is_file() and set(json.loads((data / "files.json").read_text())) >= {"README.md"}


def test_a_cards_eval_command_plays_the_split_and_temperature_its_results_report():
    from trl_starpo.hub.cards import AgentRecord, model_card

    record = AgentRecord(environments=["alfworld"], validation={
        "split": "valid_unseen", "episodes": 8, "temperature": 0.0, "before": {"success": 0.25}})
    card = model_card(record, repo_id="me/agent")
    assert "trl-starpo eval --env alfworld --model me/agent --split valid_unseen --episodes 64 --temperature 0" in card
