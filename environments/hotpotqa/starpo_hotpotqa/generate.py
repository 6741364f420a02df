"""A fictional encyclopedia and its HotPotQA-style multi-hop questions, generated from a seed.

Each split gets its own small world of countries, cities, people, organisations and works, all with invented names,
so a model cannot answer from memory and no page that supports a validation or test question is seen in training.
Every entity has a page: a lead sentence, then its facts and a few filler sentences in random order, so some facts
sit past the sentences a search shows and need a lookup. The pages name each other by exact title, like links.

Questions come in HotPotQA's two types:

- bridge: a fact on page A names entity B, and the question asks about B ("In what year was the founder of
  Vornak Optics born?"): supporting facts (A, sentence naming B), (B, sentence with the answer);
- comparison: two entities of one kind compared on one attribute ("Who was born first, X or Y?", "Are X and Y of
  the same nationality?"), answered by one of the two titles or by yes / no: supporting facts (X, i), (Y, j).

Everything is drawn from ``random.Random`` seeded from the seed and the split, so the same seed and version always
give the same files. Every kept question is checked by playing the scripted expert on it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .env import MAX_STEPS, Corpus, HotpotQAEnv, answer_in_text
from .hotpotqa_answer.hotpotqa_answer import normalize_answer

__all__ = ["VERSION", "SPLIT_SIZES", "WORLD_SIZES", "WorldSize", "generate"]

SPLITS = ("train", "validation", "test")
# Each split's world and questions are drawn in order, from the generator version that last drew that split: 1.1 drew
# the test split anew (the learning benchmark's settings had been chosen on the 1.0 draw, so it no longer measured
# held-out tasks). A split drawn again replaces its earlier draw, whose entity names stay taken, so the new world
# shares no name with the one it replaces; train and validation keep their 1.0 draw byte for byte.
DRAWS = (("train", "1.0"), ("validation", "1.0"), ("test", "1.0"), ("test", "1.1"))
SPLIT_VERSIONS = dict(DRAWS)  # the last draw of each split wins
VERSION = DRAWS[-1][1]  # the generator's version: its newest draw
SPLIT_SIZES = {"train": 1000, "validation": 200, "test": 200}
BRIDGE_SHARE = 0.8  # HotPotQA's dev set is about 80% bridge, 20% comparison questions.
LAST_YEAR = 2023


@dataclass(frozen=True)
class WorldSize:
    """How many entities of each kind one split's world has."""

    countries: int
    cities: int
    people: int
    organisations: int
    works: int


WORLD_SIZES = {
    "train": WorldSize(countries=20, cities=100, people=320, organisations=150, works=240),
    "validation": WorldSize(countries=8, cities=30, people=90, organisations=40, works=70),
    "test": WorldSize(countries=8, cities=30, people=90, organisations=40, works=70),
}

# ---------------------------------------------------------------------------------------------------------------
# Vocabulary

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t", "tr",
           "v", "z", "b", "d", "k", "l", "m", "n", "r", "s", "t", "v")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "a", "e", "ai", "ei", "ou")
_CODAS = ("n", "r", "l", "s", "m", "th", "nd", "rk", "st", "v", "sh", "n", "r", "l", "s")
_SURNAME_ENDINGS = ("", "", "", "ski", "son", "ez", "elli", "berg", "ard", "ov", "mann", "ine")
_FIRST_NAME_ENDINGS = ("", "", "a", "o", "in", "el", "ia")
_CITY_ENDINGS = ("", "", "", "a", "ova", "burg", "haven", "mouth", "ford", "grad", "stad", "holm")
_COUNTRY_FORMS = (("ia", "ian"), ("ar", "ari"), ("ovia", "ovian"), ("estan", "estani"), ("ene", "enese"),
                  ("ora", "oran"))
_CONTINENT_ENDINGS = ("ia", "a", "ea", "is")
_REGIONS = ("northern", "southern", "eastern", "western", "central")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_TITLE_ADJECTIVES = ("Silent", "Glass", "Crimson", "Hollow", "Distant", "Iron", "Winter", "Golden", "Broken", "Quiet",
                     "Burning", "Hidden", "Pale", "Northern", "Last", "Wandering", "Velvet", "Salt", "Paper", "Amber",
                     "Bitter", "Sleeping", "Forgotten", "Restless", "Copper", "Violet", "Endless", "Shallow", "Lonely",
                     "Painted")
_TITLE_NOUNS = ("Orchard", "Harbour", "Lantern", "River", "Garden", "Mirror", "Tower", "Season", "Shore", "Compass",
                "Letter", "Meadow", "Bridge", "Island", "Crown", "Feather", "Window", "Voyage", "Bell", "Forest",
                "Horizon", "Kingdom", "Archive", "Citadel", "Labyrinth", "Carnival", "Observatory", "Lighthouse",
                "Orchestra", "Ferry")
_INDUSTRIES = ("Instruments", "Motors", "Textiles", "Shipping", "Optics", "Foods", "Mining", "Chemicals", "Engineering",
               "Porcelain", "Aviation", "Electric")
_OCCUPATIONS = ("architect", "painter", "physicist", "chemist", "engineer", "entrepreneur", "poet", "sculptor",
                "composer", "economist", "historian", "politician", "botanist")
_SUBJECTS = ("law", "medicine", "mathematics", "philosophy", "architecture", "chemistry", "music", "history")
_CITY_KINDS = ("city", "town", "port city", "market town")
_CITY_SIGHTS = ("old harbour", "spring festival", "glassworks", "botanical garden", "cathedral", "textile market",
                "tram network", "salt mines", "clock tower", "university quarter")
_GOODS = ("fishing", "mining", "tourism", "agriculture", "shipbuilding", "textiles", "timber", "banking")
_CURRENCY_UNITS = ("mark", "crown", "florin", "dinar", "thaler")
_ROLES = ("sailor", "clockmaker", "schoolteacher", "detective", "widow", "cartographer", "farmer", "soldier",
          "librarian", "beekeeper")
_SOCIETIES = ("Association", "Federation", "Guild", "Chamber")

# Work kinds: the creator's occupation, their role, the kind of organisation that brings the work out and its verb.
_WORK_KINDS = {
    "novel": {"occupation": "novelist", "role": "author", "publisher": "publishing house", "verb": "published",
              "made": "written", "creates": "wrote", "length": "It runs to {n} pages.", "range": (180, 720)},
    "film": {"occupation": "film director", "role": "director", "publisher": "film studio", "verb": "produced",
             "made": "directed", "creates": "directed", "length": "It runs for {n} minutes.", "range": (78, 181)},
    "album": {"occupation": "singer-songwriter", "role": "artist", "publisher": "record label", "verb": "released",
              "made": "recorded", "creates": "recorded", "length": "It contains {n} tracks.", "range": (8, 19)},
}
_CREATOR_SHARE = 0.14  # of the people, for each work kind's occupation
_ORGANISATION_KINDS = ("company", "university", "publishing house", "film studio", "record label")
_ORGANISATION_WEIGHTS = (3, 2, 2, 2, 2)


# ---------------------------------------------------------------------------------------------------------------
# Entities


@dataclass(eq=False)
class Country:
    name: str
    adjective: str
    continent: str
    region: str
    population: float  # millions
    independence: int
    capital: City | None = None


@dataclass(eq=False)
class City:
    name: str
    country: Country
    kind: str
    region: str
    population: int
    founded: int


@dataclass(eq=False)
class Person:
    name: str
    surname: str
    pronoun: str
    born: tuple[int, int, int]  # day, month, year
    died: tuple[int, int, int] | None
    birthplace: City
    nationality: Country
    occupation: str
    works: list[Work] = field(default_factory=list)
    founded: list[Organisation] = field(default_factory=list)
    studied: Organisation | None = None

    @property
    def alive(self) -> bool:
        return self.died is None


@dataclass(eq=False)
class Organisation:
    name: str
    kind: str
    city: City
    founded: int
    founder: Person
    size: int  # employees, or students for a university
    works: list[Work] = field(default_factory=list)


@dataclass(eq=False)
class Work:
    name: str
    kind: str
    year: int
    creator: Person
    publisher: Organisation | None


@dataclass
class Page:
    """One encyclopedia page: its sentences and where each named fact sits."""

    title: str
    kind: str
    sentences: list[str]
    facts: dict[str, int]


@dataclass
class World:
    """One split's entities and their pages."""

    name: str
    countries: list[Country]
    cities: list[City]
    people: list[Person]
    organisations: list[Organisation]
    works: list[Work]
    pages: dict[str, Page] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[Any]:
        return {"country": self.countries, "city": self.cities, "person": self.people,
                "organisation": self.organisations, "work": self.works}[kind]


# ---------------------------------------------------------------------------------------------------------------
# Names


class Namer:
    """Invented, globally unique names (case-insensitively), drawn from ``rng``."""

    def __init__(self, rng: random.Random, used: set[str]):
        self.rng = rng
        self.used = used

    def _unique(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if name.casefold() not in self.used:
                self.used.add(name.casefold())
                return name

    def word(self, syllables: int, closed: bool | None = None) -> str:
        rng = self.rng
        text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables))
        if closed or (closed is None and rng.random() < 0.5):
            text += rng.choice(_CODAS)
        return text.capitalize()

    def first_name(self) -> str:
        return self.word(2, closed=False) + self.rng.choice(_FIRST_NAME_ENDINGS)

    def surname(self) -> str:
        return self.word(self.rng.choice((1, 2, 2)), closed=True) + self.rng.choice(_SURNAME_ENDINGS)

    def person(self) -> tuple[str, str]:
        surname = self.surname()
        return self._unique(lambda: f"{self.first_name()} {surname}"), surname

    def city(self) -> str:
        def make() -> str:
            name = self.word(2, closed=True) + self.rng.choice(_CITY_ENDINGS)
            return f"Port {name}" if self.rng.random() < 0.05 else name

        return self._unique(make)

    def country(self) -> tuple[str, str]:
        while True:
            stem = self.word(self.rng.choice((1, 2)), closed=True)
            ending, adjective = self.rng.choice(_COUNTRY_FORMS)
            name, adjective = stem + ending, stem + adjective
            if name.casefold() not in self.used and adjective.casefold() not in self.used:
                self.used.update((name.casefold(), adjective.casefold()))
                return name, adjective

    def continent(self) -> str:
        return self._unique(lambda: self.word(2, closed=True) + self.rng.choice(_CONTINENT_ENDINGS))

    def organisation(self, kind: str) -> str:
        rng = self.rng
        patterns = {
            "company": lambda: f"{self.surname()} {rng.choice(_INDUSTRIES)}",
            "university": lambda: rng.choice(
                (f"{self.surname()} University", f"{self.word(2, True)} Institute of Technology",
                 f"{self.word(2, True)} College")
            ),
            "publishing house": lambda: rng.choice(
                (f"{self.surname()} Press", f"{self.surname()} & {self.surname()}", f"{self.word(2)} Books")
            ),
            "film studio": lambda: rng.choice(
                (f"{self.word(2)} Pictures", f"{self.surname()} Films", f"{self.word(2)} Studios")
            ),
            "record label": lambda: rng.choice((f"{self.word(2)} Records", f"{self.word(2)} Sound")),
        }
        return self._unique(patterns[kind])

    def work(self) -> str:
        rng = self.rng
        patterns = (
            lambda: f"The {rng.choice(_TITLE_ADJECTIVES)} {rng.choice(_TITLE_NOUNS)}",
            lambda: f"{rng.choice(_TITLE_NOUNS)}s of {self.word(2, True)}",
            lambda: f"A {rng.choice(_TITLE_NOUNS)} for {self.first_name()}",
            lambda: f"{rng.choice(_TITLE_ADJECTIVES)} {rng.choice(_TITLE_NOUNS)}s",
            lambda: f"The {rng.choice(_TITLE_NOUNS)} of {self.surname()}",
        )
        return self._unique(lambda: rng.choice(patterns)())


# ---------------------------------------------------------------------------------------------------------------
# Worlds


def _date(rng: random.Random, year: int) -> tuple[int, int, int]:
    return rng.randint(1, 28), rng.randint(1, 12), year


def _distinct(rng: random.Random, used: set, draw: Callable[[], Any]) -> Any:
    while (value := draw()) in used:
        pass
    used.add(value)
    return value


def build_world(name: str, size: WorldSize, rng: random.Random, namer: Namer) -> World:
    """Draw the entities of one world; every relation points inside it."""
    continents = [namer.continent() for _ in range(3)]
    populations: set = set()
    countries = []
    for _ in range(size.countries):
        country_name, adjective = namer.country()
        population = _distinct(rng, populations, lambda: round(rng.uniform(0.3, 95.0), 1))
        countries.append(Country(country_name, adjective, rng.choice(continents), rng.choice(_REGIONS), population,
                                 rng.randint(1650, 1995)))

    cities = []
    for i in range(size.cities):
        country = countries[i] if i < len(countries) else rng.choice(countries)
        population = _distinct(rng, populations, lambda: rng.randint(4_000, 2_800_000))
        cities.append(City(namer.city(), country, rng.choice(_CITY_KINDS), rng.choice(_REGIONS), population,
                           rng.randint(700, 1950)))
        if country.capital is None:
            country.capital = cities[-1]

    creators = [spec["occupation"] for spec in _WORK_KINDS.values()]
    people = []
    for _ in range(size.people):
        full_name, surname = namer.person()
        year = rng.randint(1790, 1995)
        death_year = year + rng.randint(38, 96)
        birthplace = rng.choice(cities)
        nationality = birthplace.country if rng.random() < 0.85 else rng.choice(countries)
        roll = rng.random()
        occupation = (creators[int(roll / _CREATOR_SHARE)] if roll < _CREATOR_SHARE * len(creators)
                      else rng.choice(_OCCUPATIONS))
        people.append(Person(full_name, surname, rng.choice(("He", "She")), _date(rng, year),
                             _date(rng, death_year) if death_year <= LAST_YEAR else None, birthplace, nationality,
                             occupation))

    organisations = []
    for i in range(size.organisations):
        kind = (_ORGANISATION_KINDS[i] if i < len(_ORGANISATION_KINDS)
                else rng.choices(_ORGANISATION_KINDS, weights=_ORGANISATION_WEIGHTS)[0])
        while True:
            founder = rng.choice(people)
            founded = founder.born[2] + rng.randint(24, 60)
            if founded <= min(LAST_YEAR - 5, founder.died[2] if founder.died else LAST_YEAR):
                break
        city = founder.birthplace if rng.random() < 0.3 else rng.choice(cities)
        size_range = (2_000, 60_000) if kind == "university" else (40, 90_000) if kind == "company" else (15, 4_000)
        organisation = Organisation(namer.organisation(kind), kind, city, founded, founder, rng.randint(*size_range))
        founder.founded.append(organisation)
        organisations.append(organisation)

    universities = [o for o in organisations if o.kind == "university"]
    for person in people:
        options = [u for u in universities if u.founded <= person.born[2] + 18]
        if options and rng.random() < 0.4:
            person.studied = rng.choice(options)

    works = []
    kinds = list(_WORK_KINDS)
    for i in range(size.works):
        kind = kinds[i % len(kinds)]
        spec = _WORK_KINDS[kind]
        candidates = [p for p in people if p.occupation == spec["occupation"] and p.born[2] + 22 <= LAST_YEAR]
        creator = rng.choice(candidates)
        last = min(LAST_YEAR, creator.died[2] if creator.died else LAST_YEAR, creator.born[2] + 70)
        year = rng.randint(creator.born[2] + 22, last)
        publishers = [o for o in organisations if o.kind == spec["publisher"] and o.founded <= year]
        publisher = rng.choice(publishers) if publishers else None
        work = Work(namer.work(), kind, year, creator, publisher)
        creator.works.append(work)
        if publisher is not None:
            publisher.works.append(work)
        works.append(work)

    world = World(name, countries, cities, people, organisations, works)
    for entity in [*countries, *cities, *people, *organisations, *works]:
        page = _PAGE_BUILDERS[type(entity)](entity, world, namer)
        world.pages[page.title] = page
    return world


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


def _year_article(year: int) -> str:
    """The article before a year read aloud: "an 1869 novel" (eighteen...), "a 1957 film"."""
    return "an" if str(year).startswith(("8", "11", "18")) else "a"


def _format_date(date: tuple[int, int, int]) -> str:
    day, month, year = date
    return f"{day} {_MONTHS[month - 1]} {year}"


def _page(title: str, kind: str, lead: str, facts: list[tuple[str, str]], fillers: list[str],
          rng: random.Random, num_fillers: tuple[int, int]) -> Page:
    """Lead sentence first, then the facts and some fillers, shuffled."""
    count = min(len(fillers), rng.randint(*num_fillers))
    body = [*facts, *((f"filler:{i}", text) for i, text in enumerate(rng.sample(fillers, count)))]
    rng.shuffle(body)
    sentences = [lead, *(text for _, text in body)]
    positions = {"lead": 0, **{key: i for i, (key, _) in enumerate(body, start=1)}}
    return Page(title, kind, sentences, positions)


def _country_page(country: Country, world: World, namer: Namer) -> Page:
    rng = namer.rng
    neighbour = rng.choice([c for c in world.countries if c is not country] or [country])
    goods = rng.sample(_GOODS, 2)
    facts = [
        ("capital", f"Its capital is {country.capital.name}."),
        ("population", f"{country.name} has a population of about {country.population} million."),
        ("language", f"The official language is {country.adjective}."),
        ("independence", f"{country.name} became independent in {country.independence}."),
    ]
    fillers = [
        f"It borders {neighbour.name}.",
        f"Its economy is based on {goods[0]} and {goods[1]}.",
        f"The currency is the {country.adjective} {rng.choice(_CURRENCY_UNITS)}.",
        f"Its highest point is Mount {namer.word(2, True)}.",
        f"{country.name} is a member of the {namer.word(2, True)} Union.",
    ]
    lead = f"{country.name} is a country in {country.region} {country.continent}."
    return _page(country.name, "country", lead, facts, fillers, rng, (2, 4))


def _city_page(city: City, world: World, namer: Namer) -> Page:
    rng = namer.rng
    twin = rng.choice([c for c in world.cities if c is not city])
    census = rng.choice((2010, 2011, 2015, 2020, 2021))
    facts = [
        ("founded", f"{city.name} was founded in {city.founded}."),
        ("population", f"As of the {census} census, {city.name} had a population of {city.population:,}."),
    ]
    if city.country.capital is city:
        facts.append(("capital_of", f"{city.name} is the capital of {city.country.name}."))
    fillers = [
        f"It lies on the {namer.word(2, True)} River.",
        f"It is twinned with {twin.name}.",
        f"The {city.kind} is known for its {rng.choice(_CITY_SIGHTS)}.",
        f"It hosts the annual {namer.word(2, True)} Fair.",
        f"Its main square was rebuilt in {rng.randint(city.founded + 50, LAST_YEAR)}.",
        *(f"{city.name} is home to {o.name}." for o in world.organisations
          if o.kind == "university" and o.city is city),
    ]
    lead = f"{city.name} is {_article(city.kind)} {city.kind} in {city.region} {city.country.name}."
    return _page(city.name, "city", lead, facts, fillers, rng, (2, 4))


def _person_page(person: Person, world: World, namer: Namer) -> Page:
    rng = namer.rng
    born, pronoun = person.born[2], person.pronoun
    if person.alive:
        lead = (f"{person.name} (born {_format_date(person.born)}) is {_article(person.nationality.adjective)} "
                f"{person.nationality.adjective} {person.occupation}.")
    else:
        lead = (f"{person.name} ({_format_date(person.born)} – {_format_date(person.died)}) was "
                f"{_article(person.nationality.adjective)} {person.nationality.adjective} {person.occupation}.")
    facts = [("born_in", f"{pronoun} was born in {person.birthplace.name}.")]
    for i, work in enumerate(person.works):
        if i == 0:
            facts.append(("known_for", f"{person.surname} is best known for the {work.kind} {work.name}."))
        else:
            facts.append((f"work:{work.name}", f"{pronoun} also {_WORK_KINDS[work.kind]['creates']} the {work.kind} "
                                               f"{work.name}."))
    for organisation in person.founded:
        facts.append((f"founded:{organisation.name}",
                      f"In {organisation.founded}, {person.surname} founded {organisation.name}."))
    if person.studied is not None:
        facts.append(("studied", f"{pronoun} studied {rng.choice(_SUBJECTS)} at {person.studied.name}."))
    last = person.died[2] if person.died else LAST_YEAR
    elsewhere = rng.choice([c for c in world.cities if c is not person.birthplace])
    fillers = [
        f"{person.surname} married {namer.person()[0]} in {min(last, born + rng.randint(20, 45))}.",
        f"{pronoun} received the {namer.surname()} Prize in {min(last, born + rng.randint(30, 60))}.",
        f"{pronoun} lived for many years in {elsewhere.name}.",
        f"{person.surname}'s papers are kept at the {namer.word(2, True)} Library.",
        f"{pronoun} spoke {rng.choice(('two', 'three', 'four', 'five'))} languages.",
    ]
    if person.died:
        fillers.append(f"{pronoun} died in {rng.choice(world.cities).name} in {person.died[2]}.")
    return _page(person.name, "person", lead, facts, fillers, rng, (2, 4))


def _organisation_page(organisation: Organisation, world: World, namer: Namer) -> Page:
    rng = namer.rng
    since = rng.randint(max(organisation.founded + 1, 2015), LAST_YEAR)
    if organisation.kind == "university":
        size = f"As of {since}, it has about {organisation.size:,} students."
    else:
        size = f"As of {since}, it employs about {organisation.size:,} people."
    facts = [
        ("founded", f"It was founded in {organisation.founded} by {organisation.founder.name}."),
        ("size", size),
    ]
    elsewhere = rng.choice([c for c in world.cities if c is not organisation.city])
    fillers = [
        f"It opened an office in {elsewhere.name} in {rng.randint(organisation.founded + 1, LAST_YEAR)}.",
        f"{organisation.name} is a member of the {namer.word(2, True)} {rng.choice(_SOCIETIES)}.",
        f"Its first director was {namer.person()[0]}.",
        f"Its logo was designed in {rng.randint(organisation.founded, LAST_YEAR)}.",
        *(f"Its catalogue includes {work.name}." for work in organisation.works[:2]),
    ]
    kind = organisation.kind
    lead = f"{organisation.name} is {_article(kind)} {kind} based in {organisation.city.name}."
    return _page(organisation.name, "organisation", lead, facts, fillers, rng, (2, 4))


def _work_page(work: Work, world: World, namer: Namer) -> Page:
    rng = namer.rng
    spec = _WORK_KINDS[work.kind]
    if work.kind == "film":
        lead = f"{work.name} is {_year_article(work.year)} {work.year} film directed by {work.creator.name}."
    else:
        lead = f"{work.name} is {_year_article(work.year)} {work.year} {work.kind} by {work.creator.name}."
    facts = []
    if work.publisher is not None:
        facts.append(("publisher", f"It was {spec['verb']} by {work.publisher.name}."))
    role = rng.choice(_ROLES)
    fillers = [
        spec["length"].format(n=rng.randint(*spec["range"])),
        f"It won the {namer.surname()} Prize in {min(LAST_YEAR, work.year + 1)}.",
        (f"It was recorded in {rng.choice(world.cities).name}." if work.kind == "album"
         else f"The story follows {namer.first_name()}, {_article(role)} {role} in {namer.word(2, True)}."),
        f"It was first presented at the {namer.word(2, True)} Festival.",
    ]
    return _page(work.name, "work", lead, facts, fillers, rng, (2, 3))


_PAGE_BUILDERS = {Country: _country_page, City: _city_page, Person: _person_page, Organisation: _organisation_page,
                  Work: _work_page}

# ---------------------------------------------------------------------------------------------------------------
# Questions


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    type: str
    supporting_facts: tuple[tuple[str, str], ...]  # (title, fact key)


@dataclass(frozen=True)
class _Link:
    """A fact on a page of kind ``source`` that names another entity: the first hop of a bridge question."""

    name: str
    source: str
    target_kind: str
    target: Callable[[Any], Any]
    key: str
    phrases: Callable[[Any], tuple[str, ...]]


@dataclass(frozen=True)
class _Ask:
    """An attribute of an entity of kind ``target``, asked about through a link: the second hop."""

    target: str
    key: str
    answer: Callable[[Any], str | None]
    question: Callable[[str, Any], str]
    excluded_links: tuple[str, ...] = ()


def _tense(person: Person) -> str:
    return "is" if person.alive else "was"


_LINKS = (
    _Link("creator", "work", "person", lambda w: w.creator, "lead",
          lambda w: (f"the {_WORK_KINDS[w.kind]['role']} of {w.name}",)),
    _Link("publisher", "work", "organisation", lambda w: w.publisher, "publisher",
          lambda w: (f"the {_WORK_KINDS[w.kind]['publisher']} that {_WORK_KINDS[w.kind]['verb']} {w.name}",)),
    _Link("founder", "organisation", "person", lambda o: o.founder, "founded", lambda o: (f"the founder of {o.name}",)),
    _Link("city", "organisation", "city", lambda o: o.city, "lead", lambda o: (f"the city where {o.name} is based",)),
    _Link("birthplace", "person", "city", lambda p: p.birthplace, "born_in",
          lambda p: (f"the city where {p.name} was born", f"the birthplace of {p.name}")),
    _Link("known_for", "person", "work", lambda p: p.works[0] if p.works else None, "known_for",
          lambda p: (f"the {p.works[0].kind} {p.name} is best known for",)),
    _Link("studied", "person", "organisation", lambda p: p.studied, "studied",
          lambda p: (f"the university where {p.name} studied", f"the university {p.name} attended")),
    _Link("country", "city", "country", lambda c: c.country, "lead",
          lambda c: (f"the country where {c.name} is located",)),
    _Link("capital", "country", "city", lambda c: c.capital, "capital", lambda c: (f"the capital of {c.name}",)),
)

_ASKS = (
    _Ask("person", "lead", lambda p: str(p.born[2]), lambda x, p: f"In what year was {x} born?"),
    _Ask("person", "born_in", lambda p: p.birthplace.name, lambda x, p: f"In which city was {x} born?"),
    _Ask("person", "lead", lambda p: p.nationality.adjective, lambda x, p: f"What nationality {_tense(p)} {x}?"),
    _Ask("person", "lead", lambda p: p.occupation, lambda x, p: f"What {_tense(p)} the occupation of {x}?",
         excluded_links=("creator",)),
    _Ask("organisation", "founded", lambda o: o.founder.name, lambda x, o: f"Who founded {x}?",
         excluded_links=("founder",)),
    _Ask("organisation", "founded", lambda o: str(o.founded), lambda x, o: f"In what year was {x} founded?"),
    _Ask("organisation", "lead", lambda o: o.city.name, lambda x, o: f"In which city is {x} based?",
         excluded_links=("city",)),
    _Ask("organisation", "size", lambda o: f"{o.size:,}",
         lambda x, o: (f"About how many students does {x} have?" if o.kind == "university"
                       else f"About how many people does {x} employ?")),
    _Ask("city", "population", lambda c: f"{c.population:,}", lambda x, c: f"What is the population of {x}?"),
    _Ask("city", "founded", lambda c: str(c.founded), lambda x, c: f"In what year was {x} founded?"),
    _Ask("city", "lead", lambda c: c.country.name, lambda x, c: f"In which country is {x}?",
         excluded_links=("birthplace", "capital", "country")),
    _Ask("country", "capital", lambda c: c.capital.name, lambda x, c: f"What is the capital of {x}?",
         excluded_links=("capital",)),
    _Ask("country", "population", lambda c: f"{c.population} million", lambda x, c: f"How many people live in {x}?"),
    _Ask("country", "independence", lambda c: str(c.independence),
         lambda x, c: f"In what year did {x} become independent?"),
    _Ask("work", "lead", lambda w: str(w.year),
         lambda x, w: f"In what year was {x} {'published' if w.kind == 'novel' else 'released'}?"),
    _Ask("work", "publisher", lambda w: w.publisher.name if w.publisher else None,
         lambda x, w: f"Which {_WORK_KINDS[w.kind]['publisher']} {_WORK_KINDS[w.kind]['verb']} {x}?"),
)

_BRIDGES = tuple(
    (link, ask)
    for link in _LINKS
    for ask in _ASKS
    if link.target_kind == ask.target and link.name not in ask.excluded_links
)


def _bridge_question(world: World, rng: random.Random) -> Question | None:
    link, ask = rng.choice(_BRIDGES)
    source = rng.choice(world.of_kind(link.source))
    target = link.target(source)
    if target is None:
        return None
    answer = ask.answer(target)
    if answer is None:
        return None
    question = ask.question(rng.choice(link.phrases(source)), target)
    facts = ((source.name, link.key), (target.name, ask.key))
    return Question(question, answer, "bridge", facts)


def _pair(rng: random.Random, items: list[Any], same: Callable[[Any, Any], bool] | None = None,
          want_same: bool | None = None) -> tuple[Any, Any] | None:
    """Two distinct items; with ``same``, a pair for which ``same`` is ``want_same``."""
    first = rng.choice(items)
    others = [item for item in items if item is not first]
    if same is not None:
        others = [item for item in others if same(first, item) == want_same]
    return (first, rng.choice(others)) if others else None


def _comparison_question(world: World, rng: random.Random) -> Question | None:
    kind = rng.choice(("person", "person", "organisation", "work", "city", "country"))
    items = world.of_kind(kind)
    yes = rng.random() < 0.5
    if kind == "person":
        what = rng.choice(("older", "younger", "nationality", "occupation"))
        if what in ("older", "younger"):
            pair = _pair(rng, items, lambda a, b: a.born[2] == b.born[2], False)
            if pair is None:
                return None
            a, b = pair
            first = a if a.born[2] < b.born[2] else b
            if what == "older":
                text = rng.choice(("Who was born first, {a} or {b}?", "Who is older, {a} or {b}?"))
                answer = first.name
            else:
                text = "Who was born later, {a} or {b}?"
                answer = (b if first is a else a).name
            return _comparison(text, answer, a, b, "lead", "lead")
        if what == "nationality":
            pair = _pair(rng, items, lambda a, b: a.nationality is b.nationality, yes)
            text = "Are {a} and {b} of the same nationality?"
        else:
            pair = _pair(rng, items, lambda a, b: a.occupation == b.occupation, yes)
            text = "Are {a} and {b} both " + (pair[0].occupation + "s?" if pair else "")
        return _comparison(text, "yes" if yes else "no", *pair, "lead", "lead") if pair else None
    if kind == "organisation":
        what = rng.choice(("founded", "size", "city"))
        if what == "founded":
            pair = _pair(rng, items, lambda a, b: a.founded == b.founded, False)
            if pair is None:
                return None
            a, b = pair
            answer = (a if a.founded < b.founded else b).name
            return _comparison("Which was founded first, {a} or {b}?", answer, a, b, "founded", "founded")
        if what == "size":
            companies = [o for o in items if o.kind != "university"]
            pair = _pair(rng, companies, lambda a, b: a.size == b.size, False)
            if pair is None:
                return None
            a, b = pair
            answer = (a if a.size > b.size else b).name
            return _comparison("Which has more employees, {a} or {b}?", answer, a, b, "size", "size")
        pair = _pair(rng, items, lambda a, b: a.city is b.city, yes)
        return _comparison("Are {a} and {b} based in the same city?", "yes" if yes else "no", *pair, "lead",
                           "lead") if pair else None
    if kind == "work":
        if rng.random() < 0.5:
            pair = _pair(rng, items, lambda a, b: a.year == b.year, False)
            if pair is None:
                return None
            a, b = pair
            answer = (a if a.year < b.year else b).name
            return _comparison("Which came out first, {a} or {b}?", answer, a, b, "lead", "lead")
        pair = _pair(rng, items, lambda a, b: a.kind == b.kind and (a.creator is b.creator) == yes, True)
        if pair is None:
            return None
        spec = _WORK_KINDS[pair[0].kind]
        text = f"Were the {pair[0].kind}s {{a}} and {{b}} {spec['made']} by the same {spec['role']}?"
        return _comparison(text, "yes" if yes else "no", *pair, "lead", "lead")
    if kind == "city":
        what = rng.choice(("population", "founded", "country"))
        if what == "population":
            a, b = _pair(rng, items)
            answer = (a if a.population > b.population else b).name
            return _comparison("Which city has a larger population, {a} or {b}?", answer, a, b, "population",
                               "population")
        if what == "founded":
            pair = _pair(rng, items, lambda a, b: a.founded == b.founded, False)
            if pair is None:
                return None
            a, b = pair
            answer = (a if a.founded < b.founded else b).name
            return _comparison("Which city was founded earlier, {a} or {b}?", answer, a, b, "founded", "founded")
        pair = _pair(rng, items, lambda a, b: a.country is b.country, yes)
        return _comparison("Are {a} and {b} in the same country?", "yes" if yes else "no", *pair, "lead",
                           "lead") if pair else None
    if rng.random() < 0.5:
        a, b = _pair(rng, items)
        answer = (a if a.population > b.population else b).name
        return _comparison("Which country has more inhabitants, {a} or {b}?", answer, a, b, "population",
                           "population")
    pair = _pair(rng, items, lambda a, b: a.independence == b.independence, False)
    if pair is None:
        return None
    a, b = pair
    answer = (a if a.independence < b.independence else b).name
    return _comparison("Which country became independent first, {a} or {b}?", answer, a, b, "independence",
                       "independence")


def _comparison(text: str, answer: str, a: Any, b: Any, key_a: str, key_b: str) -> Question:
    return Question(text.format(a=a.name, b=b.name), answer, "comparison", ((a.name, key_a), (b.name, key_b)))


# ---------------------------------------------------------------------------------------------------------------
# Splits


def _task_row(question: Question, world: World, env: HotpotQAEnv, task_id: str,
              version: str) -> dict[str, Any] | None:
    """The task row of ``question``, or ``None`` if it fails a check: the bridge's first page names the second, the
    answer is in the supporting sentence and not in the question, and the scripted expert answers it in time."""
    facts = [(title, world.pages[title].facts[key]) for title, key in question.supporting_facts]
    (first, first_index), (second, second_index) = facts
    if question.type == "bridge":
        answer_tokens = set(normalize_answer(question.answer).split())
        if (
            second not in world.pages[first].sentences[first_index]
            or not answer_in_text(question.answer, world.pages[second].sentences[second_index])
            or answer_tokens & set(normalize_answer(question.question).split())
        ):
            return None
    row = {
        "task_id": task_id,
        "version": version,
        "question": question.question,
        "answer": question.answer,
        "type": question.type,
        "supporting_facts": {"title": [title for title, _ in facts], "sent_id": [index for _, index in facts]},
    }
    _, info = env.reset(options={"task": row})
    terminated = truncated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(env.expert_action())
    return row if info["success"] else None


def _questions(world: World, rng: random.Random) -> Iterator[Question]:
    for _ in range(100_000):
        make = _bridge_question if rng.random() < BRIDGE_SHARE else _comparison_question
        question = make(world, rng)
        if question is not None:
            yield question
    raise ValueError(f"The {world.name} world yields too few distinct questions; make it larger.")


def generate(
    seed: int = 0,
    split_sizes: dict[str, int] = SPLIT_SIZES,
    world_sizes: dict[str, WorldSize] = WORLD_SIZES,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The corpus pages and the task rows of every split, deterministically from ``seed``.

    Returns:
        The corpus rows (``title``, ``sentences``, ``kind``, ``world``: the split whose world the page belongs to)
        and, by split, the task rows (``task_id``, ``version``, ``question``, ``answer``, ``type``,
        ``supporting_facts`` as ``{"title": [...], "sent_id": [...]}``, HotPotQA's layout).
    """
    used: set[str] = set()
    worlds = {}
    for split, version in DRAWS:
        rng = random.Random(f"starpo-hotpotqa/{version}/{seed}/{split}/world")
        worlds[split] = build_world(split, world_sizes[split], rng, Namer(rng, used))
    pages = [page for world in worlds.values() for page in world.pages.values()]
    env = HotpotQAEnv(corpus=Corpus((page.title, page.sentences) for page in pages), max_steps=MAX_STEPS)

    seen: set[str] = set()
    tasks: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:
        version = SPLIT_VERSIONS[split]
        rng = random.Random(f"starpo-hotpotqa/{version}/{seed}/{split}/questions")
        rows = tasks[split] = []
        questions = _questions(worlds[split], rng)
        while len(rows) < split_sizes[split]:
            question = next(questions)
            if question.question in seen:
                continue
            row = _task_row(question, worlds[split], env, f"hotpotqa-{split}-{len(rows):05d}", version)
            if row is not None:
                seen.add(question.question)
                rows.append(row)
    corpus = [
        {"title": page.title, "sentences": page.sentences, "kind": page.kind, "world": world.name}
        for world in worlds.values()
        for page in world.pages.values()
    ]
    return corpus, tasks
