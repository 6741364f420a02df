"""The ReAct HotPotQA environment: ``search[entity]``, ``lookup[keyword]`` and ``finish[answer]`` over pages.

The interface follows ReAct's ``WikiEnv`` and ``HotPotQAWrapper`` (Yao et al., 2023), with an offline corpus in place
of live Wikipedia: a search returns the first sentences of the page titled exactly like the query, or the titles of
similar pages; a lookup returns, one call at a time, the sentences of the current page that contain a keyword; a
finish ends the episode and is scored against the gold answer with HotPotQA's official answer F1 / exact match.

The shipped corpus and questions are read here too (``load_corpus``, ``load_tasks``), with ``datasets.load_dataset``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz, process, utils

from trl_starpo.envs import TextEnvironment, load_task_dataset

from .hotpotqa_answer.hotpotqa_answer import normalize_answer, score_answer

__all__ = [
    "CORPUS_FILE",
    "DATA_DIR",
    "Corpus",
    "HotpotQAEnv",
    "answer_in_text",
    "corpus_from_contexts",
    "default_corpus",
    "load_corpus",
    "load_tasks",
    "parse_action",
]

DATA_DIR = Path(__file__).parent / "data"
CORPUS_FILE = DATA_DIR / "corpus.jsonl"

SUMMARY_SENTENCES = 5
NUM_SIMILAR = 5
MAX_STEPS = 7
MAX_QUERY_CHARS = 256  # Wikipedia's longest titles; similar-title search costs (query length x title length) per title
MAX_ECHO_CHARS = 200  # of an action repeated back in an observation
REWARDS = ("f1", "em")
ACTION_DESCRIPTION = "search[entity], lookup[keyword] or finish[answer]"

INSTRUCTIONS = (
    "Solve a question answering task by searching an encyclopedia, one action at a time. The actions are:\n"
    "(1) search[entity], which searches the exact entity and returns the first sentences of its page if it exists. "
    "If not, it will return some similar entities to search.\n"
    "(2) lookup[keyword], which returns the next sentence containing keyword in the current page.\n"
    "(3) finish[answer], which returns the answer and finishes the task.\n"
    "Answering usually takes two pages: follow what the first page says to the second. Answers are short: a name, a "
    "year, a number, a word, or yes or no. Example actions: search[Orvan Teleski], lookup[born], finish[1874]."
)
FICTIONAL_NOTE = (
    "\nThe encyclopedia describes fictional people, places, organisations and works: answer from its pages, not from "
    "memory."
)

_ACTION = re.compile(r"(?P<verb>search|lookup|finish|think)\[(?P<argument>.*)\]", re.IGNORECASE | re.DOTALL)
_KEYWORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_STOPWORDS = frozenset(
    (
        "about also and are based born both city does first from have how into its later larger many more that the "
        "their them then there these this those was were what when where which while who whom whose with"
    ).split()
)


def parse_action(action: str) -> tuple[str, str] | None:
    """``(verb, argument)`` of a ReAct action such as ``search[Some Title]``, or ``None`` if it is not one.

    The verb is matched case-insensitively (ReAct's prompts write ``Search[...]``) and returned lower-cased; the whole
    action and the argument are stripped of surrounding whitespace. ``think[...]`` is ReAct's thought action.
    """
    match = _ACTION.fullmatch(action.strip())
    if match is None:
        return None
    return match["verb"].lower(), match["argument"].strip()


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _title_key(text: str) -> str:
    return " ".join(text.strip().strip("\"'").split()).casefold()


class Corpus:
    """Pages by title, with exact-title search, similar-title suggestions and mention finding.

    Args:
        pages: Each page's title and its sentences, in order.

    Subclass and override ``similar`` to plug in another retriever for the "Could not find" suggestions.
    """

    def __init__(self, pages: Mapping[str, Sequence[str]] | Iterable[tuple[str, Sequence[str]]]):
        items = pages.items() if isinstance(pages, Mapping) else pages
        self.pages: dict[str, tuple[str, ...]] = {}
        for title, sentences in items:
            sentences = tuple(s.strip() for s in sentences if s and s.strip())
            if title not in self.pages or not self.pages[title]:
                self.pages[title] = sentences
        self.titles = list(self.pages)
        self._by_key = {}
        for title in self.titles:
            self._by_key.setdefault(_title_key(title), title)
        self._lowered = [title.lower() for title in self.titles]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Corpus:
        """A corpus from rows with ``title`` and ``sentences`` columns (a ``datasets.Dataset`` works)."""
        return cls((row["title"], row["sentences"]) for row in rows)

    @classmethod
    def from_context(cls, context: Mapping[str, Any] | Sequence[Sequence[Any]]) -> Corpus:
        """A corpus from a HotPotQA ``context``: the Hub layout ``{"title": [...], "sentences": [[...], ...]}`` or the
        original JSON layout ``[[title, [sentence, ...]], ...]``."""
        if isinstance(context, Mapping):
            return cls(zip(context["title"], context["sentences"]))
        return cls((title, sentences) for title, sentences in context)

    def __len__(self) -> int:
        return len(self.pages)

    def __contains__(self, title: object) -> bool:
        return title in self.pages

    def find(self, entity: str) -> str | None:
        """The title matching ``entity`` exactly, ignoring case, surrounding quotes and repeated spaces."""
        return self._by_key.get(_title_key(entity))

    def similar(self, entity: str, limit: int = NUM_SIMILAR) -> list[str]:
        """Up to ``limit`` titles most similar to ``entity`` (rapidfuzz's WRatio on lower-cased, alphanumeric text).

        Only the first ``MAX_QUERY_CHARS`` characters of ``entity`` are compared, so the work stays bounded.
        """
        matches = process.extract(
            entity[:MAX_QUERY_CHARS], self.titles, scorer=fuzz.WRatio, processor=utils.default_process, limit=limit, score_cutoff=1
        )
        return [title for title, _, _ in matches]

    def mentions(self, text: str) -> list[str]:
        """The titles that occur in ``text`` as whole words (case-insensitive), in order of first occurrence."""
        lowered = text.lower()
        found = []
        for key, title in zip(self._lowered, self.titles):
            start = lowered.find(key)
            while start >= 0:
                end = start + len(key)
                if not (start and lowered[start - 1].isalnum()) and not (end < len(lowered) and lowered[end].isalnum()):
                    found.append((start, title))
                    break
                start = lowered.find(key, start + 1)
        return [title for _, title in sorted(found, key=lambda item: item[0])]


def corpus_from_contexts(rows: Iterable[Mapping[str, Any]]) -> Corpus:
    """One ``Corpus`` of the distinct paragraphs in the ``context`` of many HotPotQA rows (the first one per title).

    With the rows of a whole split of the real dataset this gives every question the same, larger search space
    (all the gold and distractor paragraphs of the split), a cheap stand-in for HotPotQA's full-wiki setting.
    """

    def pages() -> Iterable[tuple[str, Sequence[str]]]:
        for row in rows:
            yield from Corpus.from_context(row["context"]).pages.items()

    return Corpus(pages())


def _supporting_facts(task: Mapping[str, Any]) -> list[tuple[str, int]]:
    """HotPotQA supporting facts as ``(title, sentence index)`` pairs, from either layout."""
    facts = task.get("supporting_facts") or []
    if isinstance(facts, Mapping):
        return [(str(title), int(index)) for title, index in zip(facts["title"], facts["sent_id"])]
    return [(str(title), int(index)) for title, index in facts]


def load_corpus(source: str | None = None):
    """The corpus pages (``title``, ``sentences``, ...) as a ``datasets.Dataset``, via ``datasets.load_dataset``.

    Args:
        source: A Hub dataset id, a local folder or a ``.jsonl`` / ``.json`` file with ``title`` and ``sentences``
            columns, instead of the package's fictional corpus.
    """
    import datasets

    if source is None or source.endswith((".json", ".jsonl")):
        return datasets.load_dataset("json", data_files=str(source or CORPUS_FILE), split="train")
    return datasets.load_dataset(source, split="train")


@cache
def default_corpus() -> Corpus:
    """The package's fictional corpus as a ``Corpus``, loaded once per process and shared by every environment."""
    pages = load_corpus()
    return Corpus(zip(pages["title"], pages["sentences"]))


def load_tasks(split: str | None = None, source: str | None = None):
    """The shipped questions (or those of ``source``), as with ``trl_starpo.envs.load_task_dataset``."""
    return load_task_dataset(DATA_DIR, split, source)


class HotpotQAEnv(TextEnvironment):
    """Multi-hop question answering with ReAct's actions and HotPotQA's answer scoring.

    Each episode is one question. The first observation is ``"Question: <question>"``. Actions (the verb is
    case-insensitive):

    - ``search[entity]``: the first ``summary_sentences`` sentences of the page titled ``entity`` (ignoring case), or
      ``Could not find <entity>. Similar: [...]`` with the titles of the most similar pages. A found page becomes the
      current page and resets lookups.
    - ``lookup[keyword]``: ``(Result i / n) <sentence>``, the next of the ``n`` sentences of the current page that
      contain ``keyword`` (ignoring case); repeating the keyword steps through them, ``No more results.`` after the
      last one or without a current page.
    - ``finish[answer]``: ends the episode (``Episode finished, reward = <reward>``). The reward is the answer's F1
      against the gold answer (or its exact match, with ``reward="em"``), after HotPotQA's normalization;
      ``info["success"]`` is exact match.
    - ``think[thought]``: ReAct's thought action, answered ``Nice thought.``

    Anything else is invalid (``info["action_is_valid"]`` is False). Every action counts as a step, as in ReAct;
    after ``max_steps`` steps without a finish the episode is truncated with reward 0. Every other step has reward 0.

    A task row needs ``question`` and ``answer``, and gives ``supporting_facts`` for the scripted expert. When it has
    a non-empty HotPotQA ``context`` (its distractor paragraphs), the episode searches those pages instead of the
    environment's corpus, so rows of the real dataset work as they are.

    Args:
        corpus: The pages to search: a ``Corpus``, rows with ``title`` and ``sentences`` (a ``datasets.Dataset``,
            say), or a Hub id, folder or ``.jsonl`` file of such rows (see ``load_corpus``). ``None`` uses the
            package's own corpus of fictional pages.
        reward: ``"f1"`` (default) or ``"em"``.
        max_steps: Steps before truncation; ReAct gives HotPotQA 7.
        tasks: Task rows ``reset`` draws from when it gets no task (by default the shipped ``split``).
        split: Which shipped split to draw from when ``tasks`` is ``None``.
        summary_sentences: Sentences a successful search shows; ReAct's ``WikiEnv`` shows 5.
        num_similar: Titles suggested when a search finds no page.
    """

    action_description = ACTION_DESCRIPTION
    example_action = "search[Orvan Teleski]"  # the instructions' own example; any search is a valid action

    def __init__(
        self,
        corpus: Corpus | Iterable[Mapping[str, Any]] | str | None = None,
        reward: str = "f1",
        max_steps: int = MAX_STEPS,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        split: str = "train",
        summary_sentences: int = SUMMARY_SENTENCES,
        num_similar: int = NUM_SIMILAR,
    ):
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}.")
        if max_steps < 1 or summary_sentences < 1 or num_similar < 0:
            raise ValueError("max_steps and summary_sentences must be positive and num_similar non-negative.")
        fictional = corpus is None
        if fictional:
            corpus = default_corpus()
        elif isinstance(corpus, str):
            corpus = load_corpus(corpus)
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.from_rows(corpus)
        self.system_prompt = INSTRUCTIONS + (FICTIONAL_NOTE if fictional else "")
        self.reward = reward
        self.max_steps = max_steps
        self.summary_sentences = summary_sentences
        self.num_similar = num_similar
        self._tasks = tasks
        self.split = split
        self._task: Mapping[str, Any] | None = None
        self._done = True

    # ---------------------------------------------------------------------------------------------------------------
    # Episode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the question ``options["task"]``, or else one drawn from the tasks by ``seed`` (random if ``None``)."""
        task = (options or {}).get("task")
        if task is None:
            task = self._draw_task(seed)
        if not task.get("question") or task.get("answer") is None:
            raise ValueError("A HotPotQA task needs a 'question' and an 'answer'.")
        self._task = task
        context = task.get("context")
        self._pages = Corpus.from_context(context) if context and _context_titles(context) else self.corpus
        self._facts = _supporting_facts(task)
        self._page: str | None = None
        self._lookup_keyword: str | None = None
        self._lookup_list: list[int] = []
        self._lookup_count = 0
        self._shown: set[tuple[str, int]] = set()
        self._observations = [f"Question: {task['question']}"]
        self._steps = 0
        self._answer: str | None = None
        self._done = False
        info = {"task_id": task.get("task_id", task.get("id")), "type": task.get("type")}
        return self._observations[0], info

    def _draw_task(self, seed: int | None) -> Mapping[str, Any]:
        if self._tasks is None:
            self._tasks = load_tasks(self.split)
        index = random.Random(seed).randrange(len(self._tasks))
        return dict(self._tasks[index])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Execute one ReAct action; see the class docstring."""
        if self._done:
            raise RuntimeError("The episode is over; call reset() first.")
        self._steps += 1
        parsed = parse_action(action)
        verb, argument = parsed if parsed is not None else ("", "")
        reward, terminated, valid, effective, extra = 0.0, False, True, False, {}
        if verb == "search" and argument:
            observation, effective = self._search(argument)
        elif verb == "lookup" and argument:
            observation, effective = self._lookup(argument)
        elif verb == "finish":
            self._answer = argument
            extra = self._score(argument)
            reward = extra["em"] if self.reward == "em" else extra["f1"]
            observation, terminated, effective = f"Episode finished, reward = {round(reward, 3):g}", True, True
        elif verb == "think":
            observation = "Nice thought."
        else:
            valid = False
            shown = _shorten(action.strip(), MAX_ECHO_CHARS)
            observation = f"Invalid action: {shown}. Valid actions are {ACTION_DESCRIPTION}."
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._observations.append(observation)
        success = terminated and extra["em"] == 1.0
        info = self.step_info(
            valid=valid, effective=effective, success=success, steps=self._steps, answer=self._answer, **extra
        )
        return observation, reward, terminated, truncated, info

    def _search(self, entity: str) -> tuple[str, bool]:
        title = self._pages.find(entity)
        if title is None:
            similar = self._pages.similar(entity, self.num_similar) if self.num_similar else []
            return f"Could not find {_shorten(entity, MAX_QUERY_CHARS)}. Similar: {similar}.", False
        self._page = title
        self._lookup_keyword, self._lookup_list, self._lookup_count = None, [], 0
        sentences = self._pages.pages[title][: self.summary_sentences]
        self._shown.update((title, index) for index in range(len(sentences)))
        return " ".join(sentences), True

    def _lookup(self, keyword: str) -> tuple[str, bool]:
        if keyword != self._lookup_keyword:
            self._lookup_keyword = keyword
            self._lookup_list = self._matching_sentences(self._page, keyword) if self._page is not None else []
            self._lookup_count = 0
        if self._lookup_count >= len(self._lookup_list):
            return "No more results.", False
        index = self._lookup_list[self._lookup_count]
        self._lookup_count += 1
        self._shown.add((self._page, index))
        sentence = self._pages.pages[self._page][index]
        return f"(Result {self._lookup_count} / {len(self._lookup_list)}) {sentence}", True

    def _matching_sentences(self, title: str, keyword: str) -> list[int]:
        keyword = keyword.lower()
        return [i for i, sentence in enumerate(self._pages.pages[title]) if keyword in sentence.lower()]

    def _score(self, answer: str) -> dict[str, Any]:
        gold = str(self._task["answer"])
        scores = score_answer(answer, gold)
        return {
            "gt_answer": gold,
            "em": scores["exact_match"],
            "f1": scores["f1"],
            "precision": scores["precision"],
            "recall": scores["recall"],
        }

    # ---------------------------------------------------------------------------------------------------------------
    # Baselines

    def admissible_actions(self) -> list[str]:
        """A finite set of useful actions (HotPotQA's real action space is open-ended).

        - ``search[t]`` for every page title ``t`` named in the question or in an observation so far (the pages the
          agent has seen "links" to), in order of first mention;
        - ``lookup[w]`` for every keyword ``w`` of the question (words of four letters or more, minus a few stop
          words), once a page is open;
        - ``finish[t]`` for the same titles, and ``finish[yes]``, ``finish[no]``.

        Answers that are not page titles (years, numbers, nationalities, occupations) are not in this set, so a
        random agent over it can only finish correctly on questions answered by a title or by yes/no.
        """
        if self._done:
            return []
        titles = self._pages.mentions("\n".join(self._observations))
        actions = [f"search[{title}]" for title in titles]
        if self._page is not None:
            actions += [f"lookup[{keyword}]" for keyword in _keywords(str(self._task["question"]))]
        actions += [f"finish[{answer}]" for answer in [*titles, "yes", "no"]]
        return list(dict.fromkeys(actions))

    def expert_action(self) -> str | None:
        """The next action of a scripted expert that follows the supporting facts.

        For each supporting fact ``(title, sentence)`` in order: ``search[title]`` unless that page is open, then,
        if the sentence is not among those shown yet, ``lookup[keyword]`` with a keyword of that sentence that
        reaches it in the fewest lookups (repeated until it is shown). Once every supporting sentence has been
        shown: ``finish[answer]``. Supporting facts naming a missing page or sentence are skipped; ``None`` when the
        episode is over.
        """
        if self._done:
            return None
        for title, index in self._facts:
            if title not in self._pages or index >= len(self._pages.pages[title]) or (title, index) in self._shown:
                continue
            if self._page != title:
                return f"search[{title}]"
            if self._lookup_keyword is not None and self._lookup_keyword_reaches(index):
                return f"lookup[{self._lookup_keyword}]"
            return f"lookup[{self._best_keyword(title, index)}]"
        return f"finish[{self._task['answer']}]"

    def _lookup_keyword_reaches(self, index: int) -> bool:
        return index in self._lookup_list[self._lookup_count :]

    def _best_keyword(self, title: str, index: int) -> str:
        """The word of sentence ``index`` whose lookup list reaches it soonest (the earliest word on ties)."""
        words = [word for word in _KEYWORD.findall(self._pages.pages[title][index]) if len(word) >= 3]
        if not words:
            return self._pages.pages[title][index]
        return min(words, key=lambda word: self._matching_sentences(title, word).index(index))


def _keywords(question: str) -> list[str]:
    words = (word.strip("'") for word in _KEYWORD.findall(question))
    words = [word for word in words if len(word) >= 4 and word.lower() not in _STOPWORDS]
    return list(dict.fromkeys(words))


def _context_titles(context: Mapping[str, Any] | Sequence[Any]) -> bool:
    return bool(context["title"]) if isinstance(context, Mapping) else bool(context)


def answer_in_text(answer: str, text: str) -> bool:
    """Whether the normalized ``answer`` occurs in the normalized ``text`` as whole tokens."""
    return f" {normalize_answer(answer)} " in f" {normalize_answer(text)} "
