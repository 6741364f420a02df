"""Shared fixtures: a tiny tokenizer and model built from scratch (no download), and a scripted text environment."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
CORPUS = [
    "You are in a room. Move Up, Down, Left or Right to reach the goal.",
    "<think>The goal is to the right, so I move right.</think><answer>Right</answer>",
    "<think>I should go up first.</think><answer>Up || Left</answer>",
    "Numbers: [44, 19, 35] Target: 28. Use each number exactly once with + - * / and parentheses.",
    "Invalid response. Reply as <think>...</think><answer>...</answer>.",
    "The counter is at 3. Say inc or dec. Target reached. Invalid action.",
]


def build_tiny_tokenizer():
    """A byte-level BPE tokenizer trained on a few sentences, with ChatML special tokens and single-token tags."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(CORPUS * 20, trainer=trainer)
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAGS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|pad|>", bos_token="<|im_start|>"
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer):
    """A 2-layer Llama with random weights, saved as safetensors beside its tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tiny_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tiny_tokenizer.pad_token_id,
        eos_token_id=tiny_tokenizer.eos_token_id,
        bos_token_id=tiny_tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return str(path)


class CounterEnv:
    """A deterministic test environment: a counter starts at the task's ``start``; ``inc``/``dec`` move it; reaching
    ``target`` ends the episode with reward 1. Other actions are invalid. ``boom`` raises, to test failure handling."""

    system_prompt = "Reach the target number."
    action_description = "inc, dec"

    def reset(self, *, seed=None, options=None):
        task = (options or {}).get("task", {})
        self.value, self.target = task.get("start", 0), task.get("target", 2)
        return self._observation(), {}

    def _observation(self):
        return f"The counter is at {self.value}."

    def step(self, action):
        action = action.strip().lower()
        if action == "boom":
            raise RuntimeError("environment exploded")
        if action not in ("inc", "dec"):
            return "Invalid action. " + self._observation(), 0.0, False, False, {
                "action_is_valid": False, "action_is_effective": False, "success": False}
        self.value += 1 if action == "inc" else -1
        success = self.value == self.target
        info = {"action_is_valid": True, "action_is_effective": True, "success": success}
        return self._observation(), 1.0 if success else 0.0, success, False, info

    def close(self):
        pass


@pytest.fixture
def counter_env_factory():
    return CounterEnv


@pytest.fixture(scope="module")
def counter_env(tmp_path_factory):
    """The name of the ``testcounter`` environment, installed and registered through a real entry point (see
    starpo_testenv.py) for the tests of one module."""
    from starpo_testenv import NAME, install_counter_env, register

    undo = register(install_counter_env(tmp_path_factory.mktemp("envpkg")))
    yield NAME
    undo()


class ScriptedGenerator:
    """A generation backend that replays fixed responses (text, tokenized once), for exact collector tests."""

    def __init__(self, tokenizer, responses: dict[int, list[str]], eos: bool = True):
        self.tokenizer = tokenizer
        self.responses = {k: list(v) for k, v in responses.items()}
        self.eos = eos
        self.calls = []

    def reset(self):
        self.calls.clear()

    def generate(self, contexts, max_new_tokens):
        self.calls.append({k: list(v) for k, v in contexts.items()})
        out = {}
        for key in contexts:
            ids = self.tokenizer(self.responses[key].pop(0), add_special_tokens=False)["input_ids"]
            if self.eos:
                ids = ids + [self.tokenizer.eos_token_id]
            out[key] = ids[:max_new_tokens]
        return out


@pytest.fixture(scope="session")
def tiny_agent_dir(tmp_path_factory, tiny_model_dir, tiny_tokenizer):
    """The tiny model after a few seconds of supervised training on well-formed CounterEnv turns.

    It answers ``<think>…</think><answer>inc</answer>`` or ``…dec…`` about equally often, so sampled episodes
    differ in return and StarPO gets a real learning signal.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from trl_starpo.rollout.collector import RolloutCollector

    collector = RolloutCollector(tiny_tokenizer, max_actions_per_turn=2, prefill_opening_tag=False)
    prompt = collector._start(CounterEnv(), {"task_id": "t", "seed": 0, "start": 0, "target": 2}, 0)[0].token_ids
    eos = tiny_tokenizer.eos_token_id
    examples = []
    for action in ("inc", "dec"):
        response = tiny_tokenizer(f"<think>go</think><answer>{action}</answer>", add_special_tokens=False)["input_ids"]
        examples.append((prompt + response + [eos], len(prompt)))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    input_ids = torch.tensor([ids for ids, _ in examples])
    labels = input_ids.clone()
    labels[:, : examples[0][1]] = -100
    for _ in range(60):
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    path = tmp_path_factory.mktemp("tiny-agent")
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return str(path)


def play_expert(env) -> tuple[list[str], bool, dict]:
    """Step ``env`` with ``env.expert_action()`` until it has none; the actions, the last ``terminated`` and info."""
    actions, terminated, info = [], False, {}
    while (action := env.expert_action()) is not None:
        actions.append(action)
        _, _, terminated, _, info = env.step(action)
    return actions, terminated, info


def docs_example(name: str, page: str = "docs/byo_environment.md") -> str:
    """The Python block marked ``<!-- example: NAME -->`` in a docs page."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / page).read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, f"{page} has no example {name!r}"
    return match.group(1)


@pytest.fixture(scope="session")
def openenv_server(tmp_path_factory):
    """The OpenEnv server of docs/byo_environment.md, served by uvicorn in a subprocess on a free loopback port; its
    base URL. The server is stopped when the session ends."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("openenv.core", reason="openenv-core is not installed (pip install -e '.[openenv]')")
    folder = tmp_path_factory.mktemp("openenv")
    (folder / "counter_server.py").write_text(docs_example("openenv-server"), encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "counter_server:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with opener.open(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"The OpenEnv server did not start: {(folder / 'server.log').read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def adapter_dir(tmp_path, tiny_model_dir):
    """A LoRA adapter on the tiny model whose update is not zero (PEFT initializes B to zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    path = tmp_path / "adapter"
    model.save_pretrained(path)
    return path
