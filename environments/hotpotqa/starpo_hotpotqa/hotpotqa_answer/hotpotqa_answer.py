"""HotPotQA answer metric: exact match and token F1 after HotPotQA's answer normalization.

A local ``evaluate`` module, loaded without the Hub::

    import evaluate
    metric = evaluate.load("path/to/hotpotqa_answer")  # the folder holding this script
    metric.compute(predictions=["the Eiffel Tower"], references=["Eiffel Tower"])
    # {'exact_match': 1.0, 'f1': 1.0, 'precision': 1.0, 'recall': 1.0}

The scoring follows the official evaluation script of HotPotQA (``hotpot_evaluate_v1.py``): answers are lower-cased,
stripped of punctuation and of the articles "a", "an", "the", and whitespace is collapsed; F1 is computed over the
whitespace tokens of the normalized strings, except that when either normalized answer is "yes", "no" or "noanswer"
and the two differ, every score is 0. Scores are averaged over the examples and lie in [0, 1], as in that script
(not in percent, as in SQuAD's ``evaluate`` metric).

This file is self-contained (``evaluate`` copies only the script) and is also imported by ``starpo_hotpotqa``, so
the environment's rewards and the metric share one implementation.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import datasets
import evaluate

_CITATION = """\
@inproceedings{yang2018hotpotqa,
  title     = {{HotpotQA}: A Dataset for Diverse, Explainable Multi-hop Question Answering},
  author    = {Yang, Zhilin and Qi, Peng and Zhang, Saizheng and Bengio, Yoshua and Cohen, William W. and
               Salakhutdinov, Ruslan and Manning, Christopher D.},
  booktitle = {Conference on Empirical Methods in Natural Language Processing ({EMNLP})},
  year      = {2018}
}
"""

_DESCRIPTION = """\
Answer exact match and F1 of HotPotQA's official evaluation script: normalization (lower case, no punctuation, no
articles, single spaces), token-overlap F1 with the yes/no/noanswer rule, averaged over examples.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): Predicted answers.
    references (`list` of `str`): Gold answers, one per prediction.
Returns:
    exact_match (`float`): Fraction of predictions equal to their gold answer after normalization.
    f1 (`float`): Mean token F1.
    precision (`float`): Mean token precision.
    recall (`float`): Mean token recall.
Examples:
    >>> metric = evaluate.load("hotpotqa_answer")  # a local folder
    >>> metric.compute(predictions=["The Beatles", "no"], references=["Beatles", "yes"])
    {'exact_match': 0.5, 'f1': 0.5, 'precision': 0.5, 'recall': 0.5}
"""

SPECIAL_ANSWERS = ("yes", "no", "noanswer")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, and collapse whitespace (in that order)."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    """Whether the two answers are equal after ``normalize_answer``."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """Token ``(f1, precision, recall)`` of the normalized answers.

    All three are 0 when either normalized answer is "yes", "no" or "noanswer" and the other differs from it, or
    when the answers share no token.
    """
    prediction = normalize_answer(prediction)
    ground_truth = normalize_answer(ground_truth)
    if prediction != ground_truth and (prediction in SPECIAL_ANSWERS or ground_truth in SPECIAL_ANSWERS):
        return 0.0, 0.0, 0.0
    prediction_tokens = prediction.split()
    ground_truth_tokens = ground_truth.split()
    num_same = sum((Counter(prediction_tokens) & Counter(ground_truth_tokens)).values())
    if num_same == 0:
        return 0.0, 0.0, 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def score_answer(prediction: str, ground_truth: str) -> dict[str, float]:
    """``exact_match``, ``f1``, ``precision`` and ``recall`` of one answer."""
    f1, precision, recall = f1_score(prediction, ground_truth)
    return {
        "exact_match": float(exact_match_score(prediction, ground_truth)),
        "f1": f1,
        "precision": precision,
        "recall": recall,
    }


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class HotpotQAAnswer(evaluate.Metric):
    """HotPotQA answer exact match and F1."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            reference_urls=["https://hotpotqa.github.io/"],
        )

    def _compute(self, predictions: list[str], references: list[str]) -> dict[str, float]:
        if not predictions:
            return {"exact_match": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0}
        scores = [score_answer(prediction, reference) for prediction, reference in zip(predictions, references)]
        return {name: sum(score[name] for score in scores) / len(scores) for name in scores[0]}
