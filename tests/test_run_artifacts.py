"""A training run with the agent callbacks: its trajectory store (saved with checkpoints, restored on resume with
neither duplicates nor gaps), agent files, learning curves and TensorBoard logs."""

import importlib.util
import json

import pytest
from conftest import CounterEnv
from test_trainer import counter_tasks, make_args

from trl_starpo import StarPOTrainer
from trl_starpo.monitor.callbacks import attach_agent_callbacks, trajectory_store
from trl_starpo.display.plotting import PANELS, plot_learning_curves, plot_run
from trl_starpo.store import TrajectoryStore

STEPS = 3
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def png_size(path):
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()
        return image.size


def run(output_dir, model_dir, resume=None, **overrides):
    settings = dict(max_steps=STEPS, max_turns=2, save_strategy="steps", save_steps=2)
    settings.update(overrides)
    trainer = StarPOTrainer(model_dir, environment=CounterEnv, args=make_args(output_dir, **settings),
                            train_dataset=counter_tasks())
    attach_agent_callbacks(trainer, environment="counter", base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
                           preset="starpo", progress=False)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_agent_dir):
    output_dir = tmp_path_factory.mktemp("run")
    trainer = run(output_dir, tiny_agent_dir, report_to="tensorboard" if HAS_TENSORBOARD else "none")
    return output_dir, trainer


def steps_and_indices(store):
    table = store.table()
    return table.column("step").to_pylist(), table.column("index").to_pylist()


def test_every_step_is_stored_once_and_saved_with_checkpoints(finished_run):
    output_dir, trainer = finished_run
    store = trajectory_store(trainer)
    steps, indices = steps_and_indices(store)
    assert steps == [1] * 4 + [2] * 4 + [3] * 4 and indices == list(range(12))
    assert {t.task_id for t in store.trajectories()} <= {f"t{i}" for i in range(4)}
    assert store.table().column("environment").unique().to_pylist() == ["counter"]
    checkpoint = TrajectoryStore.load(output_dir / "checkpoint-2" / "trajectories")
    assert steps_and_indices(checkpoint) == ([1] * 4 + [2] * 4, list(range(8)))
    final = TrajectoryStore.load(output_dir / "trajectories")
    assert final.trajectories() == store.trajectories()


def test_resume_restores_the_store_without_duplicates_or_gaps(finished_run, tmp_path, tiny_agent_dir):
    import shutil

    output_dir, trainer = finished_run
    copy = tmp_path / "resumed"
    shutil.copytree(output_dir / "checkpoint-2", copy / "checkpoint-2")
    resumed = run(copy, tiny_agent_dir, resume=str(copy / "checkpoint-2"))
    steps, indices = steps_and_indices(trajectory_store(resumed))
    assert steps == [1] * 4 + [2] * 4 + [3] * 4 and indices == list(range(12))
    restored = trajectory_store(resumed).trajectories()[:8]
    assert restored == trajectory_store(trainer).trajectories()[:8]  # steps 1-2 come from the checkpoint


def test_agent_files_and_learning_curves(finished_run):
    output_dir, trainer = finished_run
    record = json.loads((output_dir / "starpo_agent.json").read_text())
    assert record["environments"] == ["counter"] and record["preset"] == "starpo" and record["global_step"] == STEPS
    assert record["rollout"]["max_turns"] == 2
    assert json.loads((output_dir / "checkpoint-2" / "starpo_agent.json").read_text())["global_step"] == 2
    assert png_size(output_dir / "learning_curves.png") == (1200, 650)
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    assert sum("rollout/success" in entry for entry in history) == STEPS
    page = (output_dir / "trajectories.html").read_text()
    assert page.count('<article class="trajectory') == 12 and page.count('<section class="group"') == 3  # 4 a step
    assert page.count('class="token-view"') == 12  # the trainer's tokenizer shows every trajectory's tokens
    card = (output_dir / "README.md").read_text()  # written by the agent card at each checkpoint
    assert "counter" in card and "learning_curves.png" in card


def test_plot_on_demand_from_a_logged_run(finished_run, tmp_path):
    from trl_starpo.cli import main

    output_dir, _ = finished_run
    path = plot_run(output_dir / "checkpoint-2", tmp_path / "curves.png")
    assert png_size(path) == (1200, 650)
    assert main(["plot", str(output_dir / "trainer_state.json"), "-o", str(tmp_path / "cli.png")]) == 0
    assert png_size(tmp_path / "cli.png") == (1200, 650)
    assert main(["plot", str(tmp_path / "nothing")]) == 2


def test_every_panel_names_a_logged_metric(finished_run):
    _, trainer = finished_run
    logged = {key for entry in trainer.state.log_history for key in entry}
    for title, names in PANELS:
        assert any(name in logged for name in names), title


def test_plot_marks_missing_metrics_and_validation(tmp_path):
    history = [{"step": 1, "rollout/success": 0.5, "eval_rollout/success": 0.25}]
    path = plot_learning_curves(history, tmp_path / "x.png", validation={"before": {"success": 0.1, "return": 0}})
    assert png_size(path) == (1200, 650)


def test_plot_draws_validation_intervals_and_echo_trap_detections(tmp_path, monkeypatch):
    from matplotlib.axes import Axes
    from PIL import Image

    from trl_starpo.display.plotting import echo_trap_detections

    history = [{"step": s, "rollout/success": 0.5, "grad_norm": 1.0} for s in range(1, 7)]
    history[3].update({"echo_trap/detected": 1.0, "echo_trap/success_drop": 1.0, "echo_trap/rollback_to": 2.0})
    assert echo_trap_detections(history) == [{"step": 4, "detectors": ["success_drop"], "rollback_to": 2.0}]
    bars = []
    original = Axes.errorbar
    monkeypatch.setattr(Axes, "errorbar", lambda ax, x, y, **kw: bars.append((x, y, kw)) or original(ax, x, y, **kw))
    validation = {"episodes": 4, "before": {"success": 0.0, "return": -0.1}, "after": {"success": 0.5, "episodes": 8}}
    path = plot_learning_curves(history, tmp_path / "curves.png", validation=validation)
    success = [(x, y, kw["yerr"]) for x, y, kw in bars if kw["yerr"] is not None]
    # Points at step 0 and the last step, each with its 95% Wilson interval: 0/4 reaches 0.49, 4/8 spans 0.22-0.78.
    assert [(x, y) for x, y, _ in success] == [([0], [0.0]), ([6], [0.5])]
    assert success[0][2][1][0] == pytest.approx(0.4899, abs=1e-4)
    assert success[1][2][0][0] == pytest.approx(0.5 - 0.2152, abs=1e-4)
    assert sum(kw["yerr"] is None for _, _, kw in bars) == 1  # the return panel's point: no interval
    red = sum(1 for pixel in Image.open(path).convert("RGB").getdata() if pixel == (0xC9, 0x38, 0x3A))
    assert red > 500  # the detection's dashed line, across every panel


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard is not installed (pip install tensorboard)")
def test_tensorboard_gets_the_starpo_metrics(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    output_dir, _ = finished_run
    (events,) = {p.parent for p in output_dir.glob("runs/**/events.out.tfevents.*")}
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    for tag in ("train/rollout/success", "train/rollout/return", "train/rollout/group_return_std", "train/entropy",
                "train/grad_norm", "train/loss"):
        assert tag in tags, sorted(tags)
    assert [e.step for e in accumulator.Scalars("train/rollout/success")] == [1, 2, 3]
