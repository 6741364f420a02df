"""``WebShopServerEnv``: the same text environment, played on a running WebShop server (princeton-nlp/WebShop).

Start the real site (its ``run_dev.sh`` / ``web_agent_site/app.py``, port 3000) and point the environment at it::

    env = WebShopServerEnv("http://127.0.0.1:3000")
    obs, info = env.reset(seed=12)          # the server's goal number 12 (session "fixed_12")
    obs, reward, terminated, truncated, info = env.step("search[long lasting deodorant]")

The adapter browses the site's URLs with the standard library, turns each page into WebShop's simple text mode
(visible texts joined by `` [SEP] ``) and reads the clickable buttons, product links and option radios from the HTML.
The reward is the one the server reports after Buy Now. Actions, validity, ``max_steps`` and ``info`` behave as in
``WebShopEnv``; the server's goals are unknown to the client, so there is no ``expert_action``.
"""

from __future__ import annotations

import random
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote
from urllib.request import urlopen

from trl_starpo.envs import TextEnvironment

from .env import ACTION_DESCRIPTION, EXAMPLE_ACTION, SYSTEM_PROMPT, parse_action
from .goals import search_query
from .pages import SEP

_IGNORED_TAGS = {"style", "script", "head", "title", "meta", "[document]"}
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
_SUB_PAGES = {"description": "Description", "features": "Features", "reviews": "Reviews", "attributes": "Attributes"}
_SCORE = "Your score (min 0.0, max 1.0)"


class PageParser(HTMLParser):
    """The visible texts of a WebShop page and what can be clicked on it.

    After ``feed(html)``: ``texts`` (visible, stripped, non-empty), ``buttons`` (texts of ``.btn`` buttons),
    ``products`` (texts of ``.product-link`` links), ``radios`` (``(option name, value)`` of the option inputs) and
    ``has_search_bar``.
    """

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.buttons: list[str] = []
        self.products: list[str] = []
        self.radios: list[tuple[str, str]] = []
        self.has_search_bar = False
        self._open: list[str] = []
        self._capture: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {key: value or "" for key, value in attrs}
        if tag == "input":
            self.has_search_bar |= attributes.get("id") == "search_input"
            if attributes.get("type") == "radio":
                self.radios.append((attributes.get("name", ""), attributes.get("value", "")))
        if tag in _VOID_TAGS:
            return
        self._open.append(tag)
        classes = attributes.get("class", "").split()
        if tag == "button" and "btn" in classes:
            self._capture = ("button", [])
        elif tag == "a" and "product-link" in classes:
            self._capture = ("a", [])

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open.pop() != tag:
                pass
        if self._capture is not None and self._capture[0] == tag:
            text = " ".join(self._capture[1])
            (self.buttons if tag == "button" else self.products).append(text)
            self._capture = None

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if text and not _IGNORED_TAGS.intersection(self._open):
            self.texts.append(text)
            if self._capture is not None:
                self._capture[1].append(text)


class WebShopServerEnv(TextEnvironment):
    """WebShop's text environment on a running WebShop server.

    Args:
        base_url: The server's address.
        max_steps: Valid actions before the episode is truncated.
        timeout: Seconds to wait for a page.
    """

    system_prompt = SYSTEM_PROMPT
    action_description = ACTION_DESCRIPTION
    example_action = EXAMPLE_ACTION

    def __init__(self, base_url: str = "http://127.0.0.1:3000", max_steps: int = 15, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.max_steps = max_steps
        self.timeout = timeout
        self._state: dict[str, Any] = {}
        self._page = PageParser()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start the server's goal ``options["task"]["goal_index"]``, or goal number ``seed`` (random if neither)."""
        task = (options or {}).get("task") or {}
        index = task.get("goal_index", seed if seed is not None else random.randrange(10_000))
        self._state = {"session": f"fixed_{index}", "kind": "init", "keywords": [], "page": 1, "asin": None,
                       "options": {}, "sub": None, "steps": 0, "done": False}  # fmt: skip
        self._load()
        return self._observation(), {"goal_index": index}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one ``search[...]`` or ``click[...]`` action on the server."""
        if not self._state or self._state["done"]:
            raise RuntimeError("Call reset() first; the episode is over or not started.")
        update = self._transition(parse_action(action))
        if update is None:
            info = self.step_info(valid=False, effective=False, success=False)
            return f"Invalid action.\n{self._observation()}", 0.0, False, False, info
        self._state.update(update, steps=self._state["steps"] + 1)
        self._load()
        terminated = self._state["kind"] == "done"
        reward = self._reward() if terminated else 0.0
        truncated = not terminated and self._state["steps"] >= self.max_steps
        self._state["done"] = terminated or truncated
        info = self.step_info(valid=True, effective=True, success=terminated and reward == 1.0)
        return self._observation(), reward, terminated, truncated, info

    def admissible_actions(self) -> list[str]:
        """The valid actions on the current page (on the search page, a search for the instruction)."""
        if self._state.get("done", True):
            return []
        page = self._page
        if page.has_search_bar:
            instruction = page.texts[page.texts.index("Instruction:") + 1] if "Instruction:" in page.texts else ""
            return [f"search[{search_query(instruction) or 'shopping'}]"]
        return [f"click[{text}]" for text in self._clickables()]

    def _clickables(self) -> dict[str, dict[str, Any]]:
        """Lower-cased clickable text to the state change it makes."""
        state, page = self._state, self._page
        targets: dict[str, dict[str, Any]] = {}
        for text in page.buttons:
            key = text.lower()
            if key == "back to search":
                targets[key] = {"kind": "init", "keywords": [], "page": 1, "asin": None, "options": {}}
            elif key == "next >" and state["kind"] == "search":
                targets[key] = {"page": state["page"] + 1}
            elif key == "< prev" and state["kind"] == "search":
                targets[key] = {"page": state["page"] - 1}
            elif key in ("< prev", "< back to results") and state["kind"] == "item":
                targets[key] = {"kind": "search", "asin": None, "options": {}}
            elif key in ("< prev", "< back to item page") and state["kind"] == "item_sub":
                targets[key] = {"kind": "item", "sub": None}
            elif key in _SUB_PAGES:
                targets[key] = {"kind": "item_sub", "sub": _SUB_PAGES[key]}
            elif key == "buy now":
                targets[key] = {"kind": "done"}
        for asin in page.products:
            targets.setdefault(asin.lower(), {"kind": "item", "asin": asin.upper(), "options": {}})
        for name, value in page.radios:
            targets.setdefault(value.lower(), {"options": {**state["options"], name: value}})
        return targets

    def _transition(self, parsed: tuple[str, str] | None) -> dict[str, Any] | None:
        if parsed is None:
            return None
        name, argument = parsed
        if name == "search":
            if not self._page.has_search_bar:
                return None
            return {"kind": "search", "keywords": argument.replace("/", " ").split(), "page": 1, "options": {}}
        return self._clickables().get(argument)

    def _url(self) -> str:
        state, root = self._state, self.base_url
        keywords, options = quote(str(state["keywords"]), safe=""), quote(str(state["options"]), safe="")
        kind, session, asin, page = state["kind"], state["session"], state["asin"], state["page"]
        if kind == "init":
            return f"{root}/{session}"
        if kind == "search":
            return f"{root}/search_results/{session}/{keywords}/{page}"
        if kind == "item":
            return f"{root}/item_page/{session}/{asin}/{keywords}/{page}/{options}"
        if kind == "item_sub":
            return f"{root}/item_sub_page/{session}/{asin}/{keywords}/{page}/{state['sub']}/{options}"
        return f"{root}/done/{session}/{asin}/{options}"

    def _load(self) -> None:
        with urlopen(self._url(), timeout=self.timeout) as response:
            html = response.read().decode("utf-8", errors="replace")
        self._page = PageParser()
        self._page.feed(html)

    def _reward(self) -> float:
        texts = self._page.texts
        return float(texts[texts.index(_SCORE) + 1]) if _SCORE in texts else 0.0

    def _observation(self) -> str:
        if self._state.get("kind") == "done":
            return SEP.join(["Thank you for shopping with us!", _SCORE, f"{self._reward()}"])
        return SEP.join(self._page.texts)
