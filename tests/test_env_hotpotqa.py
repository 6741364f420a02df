"""The HotPotQA environment package (environments/hotpotqa): scoring, the ReAct interface, the data and the expert."""

import json
import os
import random
import time

import datasets
import pytest
import starpo_hotpotqa
from starpo_hotpotqa import (
    CORPUS_FILE,
    DATA_DIR,
    Corpus,
    HotpotQAEnv,
    answer_in_text,
    exact_match_score,
    f1_score,
    normalize_answer,
    parse_action,
    play,
)
from starpo_hotpotqa.generate import generate

import trl_starpo
from trl_starpo.envs import Environment

SPLITS = ("train", "validation", "test")

TELESKI = [
    "Orvan Teleski (12 March 1874 – 3 May 1930) was a Karvian novelist.",
    "He was born in Kessova.",
    "Teleski married Ilsa Varn in 1899.",
    "He received the Brell Prize in 1910.",
    "He lived for many years in Port Amsel.",
    "Teleski is best known for the novel The Glass Orchard.",
    "He died in Kessova in 1930.",
]
KESSOVA = [
    "Kessova is a port city in northern Karvia.",
    "Kessova was founded in 1204.",
    "As of the 2020 census, Kessova had a population of 412,318.",
]
PAGES = {"Orvan Teleski": TELESKI, "Kessova": KESSOVA, "Kessova Harbour": ["Kessova Harbour is a harbour."]}
TASK = {
    "task_id": "hand",
    "question": "What is the population of the city where Orvan Teleski was born?",
    "answer": "412,318",
    "type": "bridge",
    "supporting_facts": {"title": ["Orvan Teleski", "Kessova"], "sent_id": [1, 2]},
}


def start(task=TASK, **kwargs):
    env = HotpotQAEnv(corpus=Corpus(PAGES), **kwargs)
    obs, info = env.reset(options={"task": task})
    return env, obs, info


# ---------------------------------------------------------------------------------------------------------------
# Scoring (HotPotQA's hotpot_evaluate_v1.py)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Beatles.", "beatles"),
        ("An apple, a day", "apple day"),
        ("  the   Eiffel-Tower! ", "eiffeltower"),
        ("A.B.C.", "abc"),
        ("Theatre an Athens", "theatre athens"),
        ("412,318", "412318"),
    ],
)
def test_normalize_answer_follows_the_official_script(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_and_f1_on_hand_computed_pairs():
    assert exact_match_score("the Beatles", "Beatles")
    assert not exact_match_score("Beatles band", "Beatles")
    # prediction tokens [orvan, teleski, novelist], gold [orvan, teleski]: P = 2/3, R = 1, F1 = 0.8
    assert f1_score("Orvan Teleski, the novelist", "Orvan Teleski") == pytest.approx((0.8, 2 / 3, 1.0))
    # [a b c] against [c d]: 1 common token, P = 1/3, R = 1/2, F1 = 0.4 ("a" is an article: [b c] then P = 1/2)
    assert f1_score("x b c", "c d") == pytest.approx((0.4, 1 / 3, 0.5))
    assert f1_score("a b c", "c d") == pytest.approx((0.5, 0.5, 0.5))
    assert f1_score("Teleski Teleski", "Teleski") == pytest.approx((2 / 3, 0.5, 1.0))
    assert f1_score("", "Kessova") == (0.0, 0.0, 0.0)
    assert f1_score("Port Amsel", "Kessova") == (0.0, 0.0, 0.0)


def test_yes_no_and_noanswer_score_zero_unless_equal():
    assert f1_score("Yes.", "yes") == (1.0, 1.0, 1.0)
    assert f1_score("yes", "no") == (0.0, 0.0, 0.0)
    assert f1_score("yes it is", "yes") == (0.0, 0.0, 0.0)  # the gold answer is special and differs
    assert f1_score("no", "no way") == (0.0, 0.0, 0.0)  # the prediction is special and differs
    assert f1_score("noanswer", "no answer") == (0.0, 0.0, 0.0)
    assert f1_score("no answer", "answer") == pytest.approx((2 / 3, 0.5, 1.0))  # "no answer" is not special
    assert exact_match_score("NO", "no")


def test_the_evaluate_metric_loads_offline_from_the_package():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    metric = starpo_hotpotqa.load_metric()
    predictions = ["The Beatles", "no", "Orvan Teleski, the novelist", "1874"]
    references = ["Beatles", "yes", "Orvan Teleski", "1875"]
    scores = metric.compute(predictions=predictions, references=references)
    assert scores == pytest.approx({"exact_match": 0.25, "f1": 0.45, "precision": (1 + 2 / 3) / 4, "recall": 0.5})


# ---------------------------------------------------------------------------------------------------------------
# The ReAct interface


@pytest.mark.parametrize(
    ("action", "parsed"),
    [
        ("search[Orvan Teleski]", ("search", "Orvan Teleski")),
        ("  Search[ Orvan Teleski ]\n", ("search", "Orvan Teleski")),
        ("LOOKUP[born]", ("lookup", "born")),
        ("finish[]", ("finish", "")),
        ("finish[The [bracketed] one]", ("finish", "The [bracketed] one")),
        ("think[first Kessova]", ("think", "first Kessova")),
        ("search Orvan", None),
        ("search[Orvan", None),
        ("jump[x]", None),
        ("", None),
    ],
)
def test_parse_action(action, parsed):
    assert parse_action(action) == parsed


def test_search_shows_the_first_five_sentences_of_an_exact_title():
    env, obs, info = start()
    assert obs == f"Question: {TASK['question']}"
    assert info == {"task_id": "hand", "type": "bridge"}
    obs, reward, terminated, truncated, info = env.step("search[orvan  teleski]")
    assert obs == " ".join(TELESKI[:5])
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"action_is_valid": True, "action_is_effective": True, "success": False, "steps": 1, "answer": None}


def test_search_without_an_exact_match_suggests_similar_titles():
    env, _, _ = start()
    obs, _, _, _, info = env.step("search[Kesova]")
    assert obs == "Could not find Kesova. Similar: ['Kessova', 'Kessova Harbour', 'Orvan Teleski']."
    assert info["action_is_valid"] and not info["action_is_effective"]
    env = HotpotQAEnv(corpus=Corpus(PAGES), num_similar=1)
    env.reset(options={"task": TASK})
    assert env.step("search[Teleski]")[0] == "Could not find Teleski. Similar: ['Orvan Teleski']."
    assert env.step("search[!!!]")[0] == "Could not find !!!. Similar: []."


def test_lookup_steps_through_the_sentences_with_the_keyword():
    env, _, _ = start()
    assert env.step("lookup[born]")[0] == "No more results."  # no page yet
    env.step("search[Orvan Teleski]")
    assert env.step("lookup[Kessova]")[0] == f"(Result 1 / 2) {TELESKI[1]}"
    obs, _, _, _, info = env.step("lookup[Kessova]")
    assert obs == f"(Result 2 / 2) {TELESKI[6]}"
    assert info["action_is_effective"]
    obs, _, _, _, info = env.step("lookup[Kessova]")
    assert obs == "No more results."
    assert info["action_is_valid"] and not info["action_is_effective"]


def test_a_new_keyword_or_page_restarts_the_lookup():
    env, _, _ = start(max_steps=20)
    env.step("search[Orvan Teleski]")
    assert env.step("lookup[kessova]")[0] == f"(Result 1 / 2) {TELESKI[1]}"
    assert env.step("lookup[NOVEL]")[0] == f"(Result 1 / 2) {TELESKI[0]}"  # case-insensitive
    assert env.step("lookup[kessova]")[0] == f"(Result 1 / 2) {TELESKI[1]}"
    env.step("search[Kessova]")
    assert env.step("lookup[kessova]")[0] == f"(Result 1 / 3) {KESSOVA[0]}"
    env.step("search[nowhere]")  # a failed search keeps the page and the lookup
    assert env.step("lookup[kessova]")[0] == f"(Result 2 / 3) {KESSOVA[1]}"


def test_finish_scores_the_answer_with_f1_by_default():
    env, _, _ = start()
    obs, reward, terminated, truncated, info = env.step("finish[412,318 people]")
    assert obs == "Episode finished, reward = 0.667"
    assert reward == pytest.approx(2 / 3)
    assert (terminated, truncated, info["success"]) == (True, False, False)
    assert info["answer"] == "412,318 people" and info["gt_answer"] == "412,318"
    assert (info["em"], info["f1"], info["precision"], info["recall"]) == pytest.approx((0.0, 2 / 3, 0.5, 1.0))
    with pytest.raises(RuntimeError):
        env.step("finish[412318]")


def test_exact_match_reward_and_success():
    env, _, _ = start(reward="em")
    assert env.step("finish[412,318 people]")[1] == 0.0
    env.reset(options={"task": TASK})
    obs, reward, terminated, _, info = env.step("Finish[412318.]")
    assert (obs, reward, terminated, info["success"]) == ("Episode finished, reward = 1", 1.0, True, True)
    with pytest.raises(ValueError, match="reward"):
        HotpotQAEnv(corpus=Corpus(PAGES), reward="accuracy")


@pytest.mark.parametrize("action", ["jump", "search Orvan Teleski", "search[]", "lookup[ ]", "", "answer: 412,318"])
def test_invalid_actions_score_nothing_and_change_nothing(action):
    env, _, _ = start()
    env.step("search[Orvan Teleski]")
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.startswith(f"Invalid action: {action.strip()}")
    assert "search[entity], lookup[keyword] or finish[answer]" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert not info["action_is_valid"] and not info["action_is_effective"]
    assert env.step("lookup[Kessova]")[0] == f"(Result 1 / 2) {TELESKI[1]}"  # still on the same page


@pytest.mark.timeout(60)
def test_long_arguments_cost_time_and_text_bounded_by_a_cap():
    # Before the cap, similar-title search ran rapidfuzz over every title with the whole argument: a 1 MB search
    # took minutes, and the observation repeated all of it.
    titles = {f"Fictional page number {i} about {word}": ["A sentence."] for i, word in enumerate(["Karvia"] * 3000)}
    env = HotpotQAEnv(corpus=Corpus(titles))
    env.reset(options={"task": TASK})
    entity = "Karvia page " * 90_000  # about 1 MB
    started = time.monotonic()
    observation = env.step(f"search[{entity}]")[0]
    assert time.monotonic() - started < 20
    assert observation.startswith("Could not find " + entity[:256] + "…. Similar: ['Fictional page number")
    observation = env.step("jump " * 200_000)[0]
    assert len(observation) < 300 and observation.startswith("Invalid action: jump jump")


def test_think_is_answered_and_every_action_counts_towards_truncation():
    env, _, _ = start(max_steps=3)
    obs, _, _, truncated, info = env.step("think[I need his birthplace.]")
    assert (obs, truncated) == ("Nice thought.", False)
    assert info["action_is_valid"] and not info["action_is_effective"]
    assert env.step("jump")[3] is False
    obs, reward, terminated, truncated, info = env.step("search[Kessova]")
    assert (reward, terminated, truncated, info["success"], info["answer"]) == (0.0, False, True, False, None)
    with pytest.raises(RuntimeError):
        env.step("finish[412,318]")


def test_expert_searches_looks_up_and_finishes():
    env, _, _ = start(
        task={
            **TASK,
            "question": "What novel is Orvan Teleski best known for?",
            "answer": "The Glass Orchard",
            "supporting_facts": [["Orvan Teleski", 5]],
        }
    )
    actions = []
    while (action := env.expert_action()) is not None:
        actions.append(action)
        *_, info = env.step(action)
    # Sentence 5 is past the search summary; "Teleski" would reach it on the third lookup, "best" on the first.
    assert actions == ["search[Orvan Teleski]", "lookup[best]", "finish[The Glass Orchard]"]
    assert info["success"]
    env, _, _ = start()
    assert play(env, TASK, HotpotQAEnv.expert_action)["success"]


def test_admissible_actions_follow_the_titles_seen():
    env, _, _ = start()
    assert env.admissible_actions() == ["search[Orvan Teleski]", "finish[Orvan Teleski]", "finish[yes]", "finish[no]"]
    env.step("search[Orvan Teleski]")
    actions = env.admissible_actions()
    assert actions[:2] == ["search[Orvan Teleski]", "search[Kessova]"]
    assert {"lookup[population]", "lookup[Orvan]", "lookup[Teleski]"} <= set(actions)
    assert "lookup[where]" not in actions and "search[Kessova Harbour]" not in actions
    assert actions[-2:] == ["finish[yes]", "finish[no]"]
    env.step("finish[no]")
    assert env.admissible_actions() == [] and env.expert_action() is None


def test_real_hotpotqa_rows_search_their_own_paragraphs():
    context = {
        "title": ["Velm Abbey", "Dara Quell", "Unrelated Page"],
        "sentences": [
            ["Velm Abbey is a ruined abbey.", " It was founded by Dara Quell in 1120."],
            ["Dara Quell (1090 – 1151) was an abbess.", " She was born in Ostrin."],
            ["Unrelated Page is about nothing."],
        ],
    }
    row = {
        "id": "5a8b57f25542995d1e6f1371",
        "question": "Where was the founder of Velm Abbey born?",
        "answer": "Ostrin",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": {"title": ["Velm Abbey", "Dara Quell"], "sent_id": [1, 1]},
        "context": context,
    }
    original_layout = {
        **row,
        "context": [[t, s] for t, s in zip(context["title"], context["sentences"])],
        "supporting_facts": [["Velm Abbey", 1], ["Dara Quell", 1]],
    }
    hub_row = datasets.Dataset.from_list([row])[0]  # as the Hub dataset gives it
    env = starpo_hotpotqa.load_environment(corpus=Corpus({}))
    for task in (hub_row, original_layout):
        _, info = env.reset(options={"task": task})
        assert info["task_id"] == row["id"]
        summary = "Velm Abbey is a ruined abbey. It was founded by Dara Quell in 1120."
        assert env.step("search[velm abbey]")[0] == summary
        assert env.step("search[Kessova]")[0].startswith("Could not find Kessova. Similar: [")
        result = play(env, task, HotpotQAEnv.expert_action)
        assert result["success"] and result["steps"] == 3
    pages = starpo_hotpotqa.corpus_from_contexts([row, {"context": {"title": ["Dara Quell"], "sentences": [["x"]]}}])
    assert pages.titles == ["Velm Abbey", "Dara Quell", "Unrelated Page"]
    assert pages.pages["Dara Quell"][1] == "She was born in Ostrin."


def test_a_corpus_can_be_given_as_rows_or_a_file(tmp_path):
    path = tmp_path / "pages.jsonl"
    path.write_text("".join(json.dumps({"title": t, "sentences": s}) + "\n" for t, s in PAGES.items()))
    for corpus in (str(path), datasets.Dataset.from_list([{"title": t, "sentences": s} for t, s in PAGES.items()])):
        env = starpo_hotpotqa.load_environment(corpus=corpus)
        assert env.corpus.pages == {title: tuple(sentences) for title, sentences in PAGES.items()}
        assert play(env, TASK, HotpotQAEnv.expert_action)["success"]


# ---------------------------------------------------------------------------------------------------------------
# The environment package and its data


def test_registered_and_follows_the_protocol():
    assert "hotpotqa" in trl_starpo.list_environments()
    env = trl_starpo.load_environment("hotpotqa", reward="em", max_steps=5)
    assert isinstance(env, Environment)
    assert (env.reward, env.max_steps) == ("em", 5)
    assert env.action_description == "search[entity], lookup[keyword] or finish[answer]"
    assert "search[entity]" in env.system_prompt and "fictional" in env.system_prompt
    assert "fictional" not in HotpotQAEnv(corpus=Corpus(PAGES)).system_prompt
    obs, info = env.reset(seed=3)
    assert obs.startswith("Question: ") and info["task_id"].startswith("hotpotqa-train-")
    assert env.reset(seed=3) == (obs, info)
    assert env.step(env.expert_action())[4]["action_is_valid"]
    env.close()


def test_shipped_splits_and_corpus():
    splits = {split: trl_starpo.load_tasks("hotpotqa", split) for split in SPLITS}
    assert {split: ds.num_rows for split, ds in splits.items()} == {"train": 1000, "validation": 200, "test": 200}
    assert splits["train"][17]["task_id"] == "hotpotqa-train-00017"
    assert set(splits["test"].column_names) == {"task_id", "version", "question", "answer", "type", "supporting_facts"}
    questions = [q for ds in splits.values() for q in ds["question"]]
    assert len(set(questions)) == len(questions)
    for split, ds in splits.items():
        assert set(ds["type"]) == {"bridge", "comparison"}
        assert set(ds["version"]) == {"1.1" if split == "test" else "1.0"}  # test was drawn anew in 1.1
    assert starpo_hotpotqa.load_tasks()["validation"].num_rows == 200
    corpus = starpo_hotpotqa.load_corpus()
    assert len(set(corpus["title"])) == corpus.num_rows == len(starpo_hotpotqa.default_corpus())


def test_every_question_is_answerable_from_the_corpus_and_splits_share_no_page():
    pages = {row["title"]: row for row in map(json.loads, CORPUS_FILE.read_text(encoding="utf-8").splitlines())}
    for split in SPLITS:
        for task in starpo_hotpotqa.load_tasks(split):
            facts = list(zip(task["supporting_facts"]["title"], task["supporting_facts"]["sent_id"]))
            assert len(facts) == 2
            for title, index in facts:
                assert pages[title]["world"] == split  # supporting pages belong to the split's own world
                assert 0 <= index < len(pages[title]["sentences"])
            (first, i), (second, j) = facts
            question, answer = task["question"], task["answer"]
            if task["type"] == "bridge":
                assert first in question and second not in question
                assert second in pages[first]["sentences"][i]
                assert answer_in_text(answer, pages[second]["sentences"][j])
                assert not answer_in_text(answer, question)
            else:
                assert first in question and second in question
                assert answer in ("yes", "no", first, second)


@pytest.mark.parametrize("split", SPLITS)
def test_scripted_expert_solves_a_sample_of_each_split(split):
    tasks = starpo_hotpotqa.load_tasks(split)
    env = starpo_hotpotqa.load_environment()
    for index in random.Random(0).sample(range(len(tasks)), 40):
        result = play(env, tasks[index], HotpotQAEnv.expert_action)
        assert result["success"] and result["return"] == 1.0 and result["steps"] <= env.max_steps


def test_random_agent_over_admissible_actions_plays_valid_actions():
    tasks = starpo_hotpotqa.load_tasks("validation").select(range(20))
    env = starpo_hotpotqa.load_environment()
    rng = random.Random(0)
    for task in tasks:
        env.reset(options={"task": task})
        assert env.expert_action() in env.admissible_actions()  # the first hop is always on offer
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, info = env.step(rng.choice(env.admissible_actions()))
            assert info["action_is_valid"]


def test_the_test_split_is_a_new_draw_sharing_no_name_with_the_first(monkeypatch):
    import starpo_hotpotqa.generate as generator

    first = dict(generator.DRAWS[:3])  # the generator as it was before the test split was drawn anew
    monkeypatch.setattr(generator, "DRAWS", tuple(first.items()))
    monkeypatch.setattr(generator, "SPLIT_VERSIONS", first)
    corpus, tasks = generate(0, split_sizes={"train": 1, "validation": 1, "test": 1})
    assert tasks["test"][0]["question"] == (  # the first draw's test question 0, as it shipped
        "About how many students does the university where Filiia Katurkski studied have?")
    first_names = {page["title"] for page in corpus if page["world"] == "test"}
    shipped = [json.loads(line) for line in CORPUS_FILE.read_text(encoding="utf-8").splitlines()]
    names = {page["title"] for page in shipped if page["world"] == "test"}
    assert len(names) == len(first_names) == 238 and not names & first_names


def test_generator_is_deterministic_and_reproduces_the_shipped_files():
    corpus, tasks = generate(0)
    assert generate(0) == (corpus, tasks)
    shipped = CORPUS_FILE.read_text(encoding="utf-8")
    assert shipped == "".join(json.dumps(page, ensure_ascii=False) + "\n" for page in corpus)
    for split, rows in tasks.items():
        text = (DATA_DIR / f"{split}.jsonl").read_text(encoding="utf-8")
        assert text == "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    other_corpus, other_tasks = generate(1, split_sizes={"train": 10, "validation": 5, "test": 5})
    assert other_corpus[0] != corpus[0] and len(other_tasks["test"]) == 5
