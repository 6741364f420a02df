"""The WebShop environment package (environments/webshop)."""

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
import starpo_webshop
from starpo_webshop import (
    Catalog,
    Goal,
    Product,
    Review,
    WebShopEnv,
    WebShopServerEnv,
    generate_catalog,
    generate_tasks,
    get_reward,
    make_task,
    normalize_color,
    parse_action,
    run_expert,
)
from starpo_webshop.catalog import options_conflict
from starpo_webshop.reward import attribute_matches, fuzzy_match, noun_words, option_matches, type_reward
from starpo_webshop.server import PageParser

import trl_starpo
from trl_starpo.envs import Environment

PATH = "Beauty & Personal Care › Personal Care › Deodorants & Antiperspirants › Deodorant"
INSTRUCTION = "i need a long lasting deodorant with scent: lavender, and size: 2.6 ounce (pack of 1), and price lower than 20.00 dollars"  # noqa: E501
SEP = " [SEP] "


def make_product(i=0, **fields):
    values = {
        "asin": f"B0TEST{i:04d}",
        "category": "beauty",
        "query": "deodorant",
        "product_category": PATH,
        "title": f"Brand{i} Deodorant",
        "price": 10.0 + i,
        "price_tag": f"${10.0 + i:.2f}",
    }
    return Product(**{**values, **fields})


GOAL_PRODUCT = make_product(
    title="Aurelo Aluminum Free Deodorant for Women, Long Lasting",
    price=12.99,
    price_tag="$12.99",
    rating="4.5",
    description="Meet the Aurelo deodorant. Key features: aluminum free and long lasting.",
    features=("ALUMINUM FREE: tested to meet our quality standards", "Glides on smoothly."),
    attributes=("aluminum free", "long lasting", "sensitive skin"),
    options={"scent": ("lavender", "coconut"), "size": ("2.6 ounce (pack of 1)", "2.6 ounce (pack of 2)")},
    reviews=(Review("Love it", 5, "Love it! Long lasting."), Review("Okay", 4, "Fine for the price.")),
)
GOAL = Goal(
    asin=GOAL_PRODUCT.asin,
    instruction_text=INSTRUCTION,
    query="deodorant",
    product_category=PATH,
    name=GOAL_PRODUCT.title,
    attributes=("aluminum free", "long lasting"),
    goal_options={"scent": "lavender", "size": "2.6 ounce (pack of 1)"},
    price_upper=20.0,
)


@pytest.fixture(scope="module")
def small_env():
    """A store of 23 deodorants (three result pages for "deodorant"); the goal product is the first."""
    products = [GOAL_PRODUCT] + [make_product(i) for i in range(1, 23)]
    return WebShopEnv(Catalog(products, version="test"), max_steps=50)


@pytest.fixture(scope="module")
def env():
    return WebShopEnv()


def start(env, goal=GOAL):
    obs, _ = env.reset(options={"task": {"task_id": "hand", **goal.to_row()}})
    return obs


def test_registered_and_follows_the_protocol():
    assert "webshop" in trl_starpo.list_environments()
    env = trl_starpo.load_environment("webshop", max_steps=10)
    assert isinstance(env, Environment) and env.max_steps == 10
    assert "search[" in env.system_prompt and "click[" in env.system_prompt
    assert "search[query]" in env.action_description
    obs, info = env.reset(seed=3)
    assert info == {"seed": 3}
    assert obs == f"WebShop [SEP] Instruction: [SEP] {env.goal.instruction_text} [SEP] Search"
    assert env.goal.instruction_text.endswith("dollars")
    assert env.reset(seed=3)[0] == obs
    assert callable(env.admissible_actions) and callable(env.expert_action)


# ---------------------------------------------------------------- reward


def test_reward_is_one_for_the_goal_product_with_the_goal_options():
    reward, info = get_reward(GOAL_PRODUCT, GOAL, price=12.99, options=GOAL.goal_options)
    assert reward == 1.0
    assert info == {
        "r_type": 1.0,
        "query_match": True,
        "category_match": True,
        "title_score": 1.0,
        "r_att": 1.0,
        "w_att": pytest.approx(2 / 5),
        "r_option": 1.0,
        "w_option": pytest.approx(2 / 5),
        "r_price": True,
        "w_price": pytest.approx(1 / 5),
    }


@pytest.mark.parametrize(
    ("price", "options", "expected"),
    [
        (25.0, GOAL.goal_options, 4 / 5),  # over the price bound
        (12.99, {"scent": "lavender"}, 4 / 5),  # size not selected
        (12.99, {}, 3 / 5),  # no option selected
        (12.99, {"scent": "coconut", "size": "2.6 ounce (pack of 2)"}, 3 / 5),  # both options wrong
        (99.0, {"scent": "coconut"}, 2 / 5),
    ],
)
def test_reward_counts_matched_attributes_options_and_price(price, options, expected):
    assert get_reward(GOAL_PRODUCT, GOAL, price=price, options=options)[0] == pytest.approx(expected)


def test_attributes_match_fuzzily_or_in_the_product_texts():
    goal = Goal("x", "", "q", PATH, "t", ("tea tree", "essential oils", "natural ingredients"), {}, 10.0)
    assert attribute_matches(make_product(attributes=("tea tree", "essential oil", "natural ingredients")), goal) == 3
    assert attribute_matches(make_product(attributes=("essential oil", "natural ingredients")), goal) == 2
    in_texts = make_product(features=("Made with essential oils.",), description="With natural ingredients.")
    assert attribute_matches(in_texts, goal) == 2
    assert attribute_matches(make_product(attributes=("tea bag", "earl gray"), title="English Tea"), goal) == 0


def test_size_options_match_exactly_the_others_fuzzily_after_colour_normalisation():
    product = make_product()
    assert option_matches(product, ["2.6 ounce (pack of 1)"], {"size": "2.6 ounce (pack of 2)"}) == 0
    assert option_matches(product, ["2.6 ounce (pack of 1)"], {"style": "2.6 ounce (pack of 2)"}) == 1
    assert option_matches(product, ["navy blue", "large"], {"color": "sky blue", "size": "x-large"}) == 1
    assert option_matches(product, ["grey", "xl", "pack of 12"], {"a": "pack of 12", "b": "blue", "size": "xl"}) == 2
    assert option_matches(product, ["cool powder snow"], {"scent": "powder snow"}) == 1
    # a selected value found in the product's own texts counts, as in WebShop
    assert option_matches(make_product(title="Brand Deodorant, Coconut"), ["lavender"], {"scent": "coconut"}) == 1


def test_normalize_color_takes_the_first_colour_word_of_webshops_list():
    cases = {"": "", "black forest": "black", "violet lavender": "lavender", "123alabaster": "alabaster"}
    cases |= {"webshop": "webshop", "navy blue": "blue", "dark chocolate": "chocolate"}
    for value, expected in cases.items():
        assert normalize_color(value) == expected
    assert fuzzy_match("essential oil", "essential oils") and not fuzzy_match("lavender", "coconut")


def test_type_reward_factors():
    nouns = noun_words("Aurelo Aluminum Free Deodorant Stick for Women, Baking Soda Free, Travel Size")
    assert nouns == ["aurelo", "aluminum", "deodorant", "stick", "women", "baking", "soda", "travel", "size"]
    goal = Goal("x", "", "deodorant", PATH, " ".join(nouns), (), {}, 10.0)
    other_path = "Beauty & Personal Care › Hair Care › Shampoos"
    shampoo = make_product(query="shampoo", product_category=other_path)

    def r_type(title, product=shampoo):
        return type_reward(replace(product, title=title), goal)

    assert r_type("Brisko Shampoo for Men") == {
        "r_type": 0.0, "query_match": False, "category_match": False, "title_score": 0.0
    }  # fmt: skip
    assert r_type("Brisko Shampoo for Women")["r_type"] == 0.5  # one noun in nine, nothing else matches
    assert r_type("Brisko Shampoo for Women, Travel Size")["r_type"] == 1.0  # three in nine > 0.2
    long_goal = Goal("x", "", "deodorant", PATH, goal.name + " tea tree scent", (), {}, 10.0)
    assert type_reward(make_product(title="Brisko Women"), long_goal)["r_type"] == 0.1  # 1/12 < 0.1
    same_query = type_reward(make_product(title="Brisko Deodorant"), goal)
    assert same_query["query_match"] and same_query["category_match"] and same_query["r_type"] == 1.0
    sibling = make_product(query="body wash", product_category="Beauty & Personal Care › Personal Care › Body")
    assert type_reward(sibling, goal)["category_match"]  # two shared levels


def test_wrong_product_type_scales_the_whole_reward():
    shampoo = make_product(
        query="shampoo", product_category="Beauty & Personal Care › Hair Care › Shampoos", title="Brisko Shampoo",
        attributes=("aluminum free", "long lasting"),
    )  # fmt: skip
    assert get_reward(shampoo, GOAL, price=5.0, options={})[0] == 0.0
    shampoo_for_women = replace(shampoo, title="Brisko Shampoo for Women")
    # nouns of the goal title: aurelo, aluminum, deodorant, women -> 1/4 > 0.2: the type still counts fully
    assert get_reward(shampoo_for_women, GOAL, price=5.0, options={})[0] == pytest.approx(3 / 5)


# ---------------------------------------------------------------- pages and actions


def test_parse_action():
    assert parse_action("click[Buy Now]") == ("click", "buy now")
    assert parse_action("  search[ Red   Shoes ]\n") == ("search", "red shoes")
    assert parse_action("CLICK[< Prev]") == ("click", "< prev")
    assert parse_action("click[Buy Now].") == ("click", "buy now")  # WebShop ignores what follows the last "]"
    assert parse_action("search[a] or click[b]") == ("search", "a] or click[b")
    for text in ("buy now", "search[]", "search[  ]", "look[x]", "click x", ""):
        assert parse_action(text) is None


def test_search_results_item_and_sub_pages(small_env):
    env = small_env
    header = f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search"
    assert start(env) == f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"
    assert env.admissible_actions() == [
        "search[i need a long lasting deodorant with scent: lavender, and size: 2.6 ounce (pack of 1)]"
    ]

    obs, reward, terminated, truncated, info = env.step("search[Deodorant]")
    results = env.catalog.search("deodorant")
    assert len(results) == 23
    shown = [env.catalog[asin] for asin in results[:10]]
    listing = SEP.join(f"{p.asin} [SEP] {p.title} [SEP] {p.price_tag}" for p in shown)
    assert obs == f"{header} [SEP] Page 1 (Total results: 23) [SEP] Next > [SEP] {listing}"
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"action_is_valid": True, "action_is_effective": True, "success": False}
    assert env.admissible_actions() == ["click[back to search]", "click[next >]"] + [
        f"click[{asin.lower()}]" for asin in results[:10]
    ]

    obs = env.step("click[Next >]")[0]
    assert "Page 2 (Total results: 23) [SEP] < Prev [SEP] Next > [SEP] " + results[10] in obs
    obs = env.step("click[next >]")[0]
    assert "Page 3 (Total results: 23) [SEP] < Prev [SEP] " + results[20] in obs
    assert "Next >" not in obs and len(env.admissible_actions()) == 2 + 3
    env.step("click[< prev]")
    obs = env.step("click[< prev]")[0]
    assert "Page 1 (Total results: 23) [SEP] Next >" in obs

    env.step("click[back to search]")
    assert env.step("search[aurelo]")[0].endswith(
        f"Page 1 (Total results: 1) [SEP] {GOAL_PRODUCT.asin} [SEP] {GOAL_PRODUCT.title} [SEP] $12.99"
    )
    product = env.catalog[GOAL_PRODUCT.asin]
    obs = env.step(f"click[{product.asin}]")[0]
    item = (
        f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] scent [SEP] lavender [SEP] "
        "coconut [SEP] size [SEP] 2.6 ounce (pack of 1) [SEP] 2.6 ounce (pack of 2) [SEP] "
        "Aurelo Aluminum Free Deodorant for Women, Long Lasting [SEP] Price: $12.99 [SEP] Rating: 4.5 [SEP] "
        "Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    assert obs == item
    assert env.admissible_actions() == [
        "click[back to search]", "click[< prev]", "click[lavender]", "click[coconut]",
        "click[2.6 ounce (pack of 1)]", "click[2.6 ounce (pack of 2)]", "click[description]", "click[features]",
        "click[reviews]", "click[buy now]",
    ]  # fmt: skip

    assert env.step("click[Lavender]")[0] == item
    assert env.selected_options == {"scent": "lavender"}
    sub_header = f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] < Prev"
    assert env.step("click[Description]")[0] == f"{sub_header} [SEP] {product.description}"
    assert env.admissible_actions() == ["click[back to search]", "click[< prev]"]
    assert env.step("click[< Prev]")[0] == item
    assert env.step("click[Features]")[0] == f"{sub_header} [SEP] {product.features[0]} [SEP] {product.features[1]}"
    env.step("click[< Prev]")
    assert env.step("click[Reviews]")[0] == (
        f'{sub_header} [SEP] "Love it" [SEP] 5 [SEP] Love it! Long lasting. [SEP] "Okay" [SEP] 4 [SEP] '
        "Fine for the price."
    )
    env.step("click[< Prev]")
    assert env.selected_options == {"scent": "lavender"}  # kept across the sub-pages

    obs = env.step("click[< Prev]")[0]  # back to the results, where options are cleared
    assert "Page 1 (Total results: 1)" in obs and env.selected_options == {}
    assert env.step("click[Back to Search]")[0] == f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"


def test_back_to_search_and_a_purchase(small_env):
    env = small_env
    start(env)
    env.step("search[aurelo]")
    env.step(f"click[{GOAL_PRODUCT.asin}]")
    assert env.step("click[back to search]")[0] == f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search"
    env.step("search[aurelo]")
    env.step(f"click[{GOAL_PRODUCT.asin.lower()}]")
    env.step("click[lavender]")
    env.step("click[2.6 ounce (pack of 2)]")
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    assert reward == pytest.approx(4 / 5)
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 0.8"
    assert (terminated, truncated, info["success"]) == (True, False, False)
    assert info["purchased"] == {
        "asin": GOAL_PRODUCT.asin,
        "options": {"scent": "lavender", "size": "2.6 ounce (pack of 2)"},
    }  # noqa: E501
    assert info["reward_info"]["r_option"] == 0.5
    assert env.admissible_actions() == [] and env.expert_action() is None
    with pytest.raises(RuntimeError):
        env.step("click[back to search]")


def test_searches_without_hits_and_products_without_reviews(small_env):
    env = small_env
    start(env)
    obs = env.step("search[xylophone]")[0]
    assert obs.endswith("Back to Search [SEP] Page 1 (Total results: 0)")
    assert env.admissible_actions() == ["click[back to search]"]
    env.step("click[back to search]")
    env.step("search[brand5]")
    env.step("click[b0test0005]")
    assert env.step("click[reviews]")[0].endswith("< Prev [SEP] No reviews found")


@pytest.mark.parametrize(
    "action",
    ["click[buy now]", "click[Search]", "search[]", "buy now", "jump", "click[B0TEST0001]", "search deodorant"],
)
def test_invalid_actions_on_the_search_page_change_nothing(small_env, action):
    obs = start(small_env)
    new_obs, reward, terminated, truncated, info = small_env.step(action)
    assert new_obs == "Invalid action.\n" + obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"action_is_valid": False, "action_is_effective": False, "success": False}
    assert small_env.step("search[deodorant]")[4]["action_is_valid"]


@pytest.mark.parametrize("action", ["search[deodorant]", "click[lavender]", "click[< prev]", "click[b0test0099]"])
def test_invalid_actions_on_the_results_page_change_nothing(small_env, action):
    start(small_env)
    obs = small_env.step("search[deodorant]")[0]
    admissible = small_env.admissible_actions()
    new_obs, reward, _, _, info = small_env.step(action)
    assert new_obs == "Invalid action.\n" + obs and reward == 0.0 and not info["action_is_valid"]
    assert small_env.admissible_actions() == admissible


def test_reselecting_an_option_is_valid_but_not_effective(small_env):
    start(small_env)
    small_env.step("search[aurelo]")
    small_env.step(f"click[{GOAL_PRODUCT.asin}]")
    assert small_env.step("click[coconut]")[4]["action_is_effective"]
    info = small_env.step("click[coconut]")[4]
    assert info["action_is_valid"] and not info["action_is_effective"]


def test_truncates_after_max_valid_steps():
    env = WebShopEnv(Catalog([GOAL_PRODUCT], version="test"), max_steps=3)
    start(env)
    assert env.step("search[deodorant]")[3] is False
    assert env.step("nonsense")[3] is False  # invalid actions do not count
    assert env.step("click[back to search]")[3] is False
    _, reward, terminated, truncated, info = env.step("search[deodorant]")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)


def test_reset_rejects_tasks_of_another_catalog(small_env):
    with pytest.raises(ValueError, match="catalog"):
        small_env.reset(options={"task": {**GOAL.to_row(), "catalog_version": "0.9"}})
    with pytest.raises(ValueError, match="not in the catalog"):
        small_env.reset(options={"task": {**GOAL.to_row(), "asin": "B0MISSING0"}})


# ---------------------------------------------------------------- shipped data, expert and baselines


def test_shipped_splits_and_catalog(env):
    splits = {split: trl_starpo.load_tasks("webshop", split) for split in ("train", "validation", "test")}
    assert {split: len(ds) for split, ds in splits.items()} == {"train": 500, "validation": 100, "test": 100}
    asins = [asin for ds in splits.values() for asin in ds["asin"]]
    assert len(set(asins)) == 700 and set(asins) <= set(env.catalog.by_asin)
    assert len(env.catalog) == 1000 and env.catalog.version == starpo_webshop.CATALOG_VERSION
    assert {v for ds in splits.values() for v in ds["catalog_version"]} == {env.catalog.version}
    row = splits["train"][17]
    assert row["task_id"] == "webshop-train-00017"
    assert row["instruction_text"].endswith(f"and price lower than {row['price_upper']:.2f} dollars")
    assert {option["value"] for option in row["goal_options"]} <= {
        value for values in env.catalog[row["asin"]].options.values() for value in values
    }
    assert starpo_webshop.load_tasks()["test"].num_rows == 100


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_expert_solves_a_sample_of_each_split(env, split):
    tasks = trl_starpo.load_tasks("webshop", split)
    for task in tasks.select(range(0, len(tasks), len(tasks) // 20)):
        assert run_expert(env, task)[0] == 1.0


def test_expert_recovers_from_a_detour_and_every_admissible_action_is_valid(env):
    import numpy as np

    rng = np.random.default_rng(0)
    task = trl_starpo.load_tasks("webshop", "validation")[3]
    env.reset(options={"task": task})
    env.step("search[fleece]")  # a search that does not find the goal product
    for _ in range(3):
        actions = env.admissible_actions()
        action = actions[int(rng.integers(len(actions)))]
        if action == "click[buy now]":
            continue
        assert env.step(action)[4]["action_is_valid"]
    info = {}
    for _ in range(12):
        *_, terminated, truncated, info = env.step(env.expert_action())
        if terminated or truncated:
            break
    assert info["success"]


def test_random_agent_rarely_succeeds(env):
    from starpo_webshop.baselines import evaluate, random_policy

    tasks = list(trl_starpo.load_tasks("webshop", "validation").select(range(20)))
    stats = evaluate(env, tasks, random_policy(0))
    assert stats["success"] <= 0.2 and 0.0 < stats["reward"] < 0.8


# ---------------------------------------------------------------- generator


def test_catalog_generation_is_deterministic_and_matches_the_shipped_file(env):
    small = generate_catalog(seed=7, products_per_type=2)
    assert small == generate_catalog(seed=7, products_per_type=2)
    assert small != generate_catalog(seed=8, products_per_type=2)
    shipped = (starpo_webshop.DATA_DIR / "catalog.jsonl").read_text().splitlines()
    regenerated = Catalog(generate_catalog()).to_rows()
    assert [json.loads(line) for line in shipped] == regenerated


def test_task_generation_is_deterministic_and_matches_the_shipped_splits(env):
    assert make_task(env.catalog, 5) == make_task(env.catalog, 5)
    assert make_task(env.catalog, 5) != make_task(env.catalog, 6)
    train = trl_starpo.load_tasks("webshop", "train")
    validation = trl_starpo.load_tasks("webshop", "validation")
    regenerated = generate_tasks(env.catalog, "validation", 5, 100_000, exclude_asins=set(train["asin"]))
    assert regenerated == [validation[i] for i in range(5)]


def test_generated_products_are_well_formed():
    for product in generate_catalog(seed=3, products_per_type=3):
        assert len(product.asin) == 10 and product.asin.startswith("B0")
        assert 3 <= len(product.attributes) <= 5 and noun_words(product.title)
        text = " ".join([product.title, product.description, *product.features]).lower()
        assert not any(ch.isdigit() for ch in text)
        groups = [(name, value) for name, values in product.options.items() for value in values]
        assert all(len(values) >= 2 for values in product.options.values())
        for i, (name_a, a) in enumerate(groups):
            assert normalize_color(a) not in text
            assert not any(options_conflict(name_a, a, name_b, b) for name_b, b in groups[i + 1 :])


def test_search_finds_a_product_by_its_title(env):
    for product in env.catalog.products[:20]:
        results = env.catalog.search(product.title)
        assert results[0] == product.asin and len(results) <= 50
    assert env.catalog.search("the of and") == []


def test_search_keeps_jax_out_of_the_process(tmp_path):
    # bm25s runs a JAX computation at import where JAX imports; on a GPU JAX then claims most of its memory
    import subprocess
    import sys

    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise AssertionError('bm25s imported jax')\n")
    (tmp_path / "jax" / "lax.py").write_text("")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from starpo_webshop import search\n"
        "assert not search.bm25s.selection.JAX_IS_AVAILABLE\n"
        "assert 'jax' not in sys.modules and 'jax.lax' not in sys.modules\n"
        "try:\n    import jax\nexcept AssertionError:\n    print('jax importable again')\n"
        "print(search.SearchEngine.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["jax", "importable", "again", "SearchEngine"]


# ---------------------------------------------------------------- real-server adapter

PAGES = {
    "index": '<html><head><title>WebShop</title></head><body><h2>WebShop</h2><div id="instruction-text"><h4>'
    "Instruction: <br>i need a red mug, and price lower than 20.00 dollars</h4></div>"
    '<input id="search_input" type="text"/><button class="btn btn-success">Search</button></body></html>',
    "search_results": '<div id="instruction-text"><h4>Instruction:<br>i need a red mug</h4></div>'
    '<button class="btn btn-success">Back to Search</button><p>Page 1 (Total results: 1)</p>'
    '<a class="product-link" href="#">B0MUG00001</a><h4>Red Mug</h4><h5>$9.99</h5>',
    "item_page": '<button class="btn">Back to Search</button><button class="btn">&lt; Prev</button>'
    '<h4>color</h4><input type="radio" name="color" value="red"><label>red</label>'
    '<input type="radio" name="color" value="blue"><label>blue</label><h2>Red Mug</h2>'
    '<script>var x = "hidden";</script><button class="btn btn-lg purchase">Buy Now</button>',
    "done": '<h1>Thank you for shopping with us!</h1><h3 id="reward">Your score (min 0.0, max 1.0)<pre>0.75</pre></h3>',
}


@pytest.fixture
def fake_server():
    """A loopback stand-in for the WebShop site serving canned pages; records the paths requested."""
    paths = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            paths.append(unquote(self.path))
            route = self.path.strip("/").split("/")[0]
            body = PAGES.get(route, PAGES["index"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()
    server.server_close()


def test_page_parser_reads_visible_text_and_clickables():
    parser = PageParser()
    parser.feed(PAGES["item_page"])
    assert parser.texts == ["Back to Search", "< Prev", "color", "red", "blue", "Red Mug", "Buy Now"]
    assert parser.buttons == ["Back to Search", "< Prev", "Buy Now"]
    assert parser.radios == [("color", "red"), ("color", "blue")] and not parser.has_search_bar


def test_server_adapter_plays_an_episode(fake_server):
    url, paths = fake_server
    env = WebShopServerEnv(url, timeout=5)
    assert isinstance(env, Environment)
    obs, info = env.reset(seed=3)
    assert info == {"goal_index": 3}
    assert obs == "WebShop [SEP] Instruction: [SEP] i need a red mug, and price lower than 20.00 dollars [SEP] Search"
    assert env.admissible_actions() == ["search[i need a red mug]"]
    assert not env.step("click[buy now]")[4]["action_is_valid"]
    obs = env.step("search[Red Mug]")[0]
    assert "Page 1 (Total results: 1) [SEP] B0MUG00001 [SEP] Red Mug [SEP] $9.99" in obs
    assert env.admissible_actions() == ["click[back to search]", "click[b0mug00001]"]
    env.step("click[b0mug00001]")
    env.step("click[red]")
    obs, reward, terminated, truncated, info = env.step("click[Buy Now]")
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 0.75"
    assert (reward, terminated, truncated, info["success"]) == (0.75, True, False, False)
    assert paths == [
        "/fixed_3",
        "/search_results/fixed_3/['red', 'mug']/1",
        "/item_page/fixed_3/B0MUG00001/['red', 'mug']/1/{}",
        "/item_page/fixed_3/B0MUG00001/['red', 'mug']/1/{'color': 'red'}",
        "/done/fixed_3/B0MUG00001/{'color': 'red'}",
    ]
