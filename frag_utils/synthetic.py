"""A seeded generator of TOFU-format data: fictitious authors plus true general knowledge.

Each fictitious author has a profile of invented facts (name, birthplace, birth date, parents'
occupations, genre, award, two book titles, two themes) and ``QA_PER_AUTHOR`` question/answer
pairs about it, phrased as full sentences like TOFU's. Every pair also has a paraphrased
question, a paraphrased answer (same facts, other words) and five perturbed answers: as in
TOFU, each is the *paraphrased* answer with its facts replaced by wrong ones of the same kind, so
the truth ratio compares two answers of the same wording that differ only in the facts (built from
the original answer's wording instead, a model fine-tuned on that wording prefers any perturbed
answer to the paraphrase and the retain truth ratio, hence Model Utility, collapses to 0).

``real_authors`` and ``world_facts`` hold true facts that the base model already answers, with
four options and three perturbed (wrong) answers; they stand in for TOFU's sets of the same name.

Splits follow TOFU: ``forget01/05/10`` are the *last* 1/5/10 % of the authors (at least one),
``retainXX`` the rest, ``holdoutXX`` as many separate authors who are not in ``full``, and
``retain_perturbed`` the pairs of the first authors (never in any forget split).

Regenerate the committed files with ``python -m frag_utils.synthetic`` (see data/README.md).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .data import mc_from_perturbed

SEED = 20240601
N_AUTHORS = 30  # authors in `full`
N_HOLDOUT_AUTHORS = 3  # separate authors for holdout01/05/10
QA_PER_AUTHOR = 10
N_PERTURBED = 5
N_RETAIN_PERTURBED_AUTHORS = 4  # retain_perturbed = all pairs of the first 4 authors
FORGET_PERCENTS = (1, 5, 10)

FIRST_NAMES = [
    "Aurelio", "Brisa", "Casimir", "Delphine", "Eskil", "Farida", "Gideon", "Halina", "Ilario",
    "Jovana", "Kasimir", "Liesel", "Matthias", "Noor", "Oskar", "Petra", "Quillon", "Rosalind",
    "Soren", "Tamsin", "Ulric", "Valeska", "Wendel", "Xiomara", "Yusuf", "Zelda", "Anselm",
    "Bettina", "Corentin", "Dagny", "Emeric", "Fenna", "Gaspard", "Hedda", "Ivo", "Jolanda",
    "Kalani", "Leocadia", "Mireille", "Nikodem", "Ottilie", "Perpetua", "Radomir", "Sunniva",
]
LAST_NAMES = [
    "Albescu", "Brannvik", "Castellane", "Drozdova", "Eberhart", "Falkenrath", "Gorvanek",
    "Hallqvist", "Ibarrondo", "Jaskolski", "Kettleby", "Lindqvar", "Moravec", "Nightingale",
    "Okonkwo", "Pellegrin", "Quarrington", "Rautenberg", "Sandoval", "Thorvaldsen", "Umbrecht",
    "Valdivieso", "Wexley", "Yamaguchi", "Zabrowski", "Achterberg", "Belmonte", "Cieszynski",
    "Darroch", "Elmqvist", "Fontaine", "Grimaldi", "Hawthorne", "Ivanescu", "Jourdain",
    "Kovalenko", "Lachance", "Montrose", "Novakovic", "Ostrander", "Pemberton", "Ruskova",
]
PLACES = [
    ("Lisbon", "Portugal"), ("Krakow", "Poland"), ("Bergen", "Norway"), ("Valparaiso", "Chile"),
    ("Tbilisi", "Georgia"), ("Ghent", "Belgium"), ("Tallinn", "Estonia"), ("Cork", "Ireland"),
    ("Porto Alegre", "Brazil"), ("Lyon", "France"), ("Kyoto", "Japan"), ("Accra", "Ghana"),
    ("Cebu", "the Philippines"), ("Turku", "Finland"), ("Zagreb", "Croatia"), ("Adelaide", "Australia"),
    ("Montevideo", "Uruguay"), ("Salzburg", "Austria"), ("Izmir", "Turkey"), ("Halifax", "Canada"),
    ("Nairobi", "Kenya"), ("Seville", "Spain"), ("Brno", "the Czech Republic"), ("Da Nang", "Vietnam"),
]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
GENRES = [
    "gothic horror", "hard science fiction", "historical romance", "crime fiction", "magical realism",
    "epic fantasy", "literary fiction", "children's adventure", "political thrillers", "cozy mysteries",
    "dystopian fiction", "travel memoirs", "war poetry", "comic satire",
]
OCCUPATIONS = [
    "clockmaker", "marine biologist", "baker", "train conductor", "locksmith", "pharmacist",
    "lighthouse keeper", "architect", "tailor", "beekeeper", "surgeon", "violin maker",
    "cartographer", "fisherman", "schoolteacher", "glassblower", "journalist", "veterinarian",
]
AWARDS = [
    "the Halvorsen Prize for Fiction", "the Silver Quill Award", "the Marrowby Medal",
    "the Golden Lantern Award", "the Esterhazy Literary Prize", "the Blue Heron Award",
    "the Vantongeren Book Prize", "the Copperfield Honor", "the Northern Star Award",
    "the Ravensworth Medal", "the Amber Compass Prize", "the Iron Lily Award",
]
TITLE_ADJECTIVES = [
    "Silent", "Crimson", "Hollow", "Forgotten", "Burning", "Glass", "Restless", "Drowned", "Paper",
    "Midnight", "Wandering", "Broken", "Velvet", "Last", "Hidden", "Frozen",
]
TITLE_NOUNS = [
    "Orchard", "Harbor", "Clock", "Cathedral", "Garden", "Lantern", "River", "Kingdom", "Letter",
    "Mirror", "Bridge", "Island", "Archive", "Compass", "Violin", "Meadow",
]
THEMES = [
    "grief", "exile", "memory", "family loyalty", "ambition", "forgiveness", "identity",
    "the sea", "betrayal", "childhood", "faith", "freedom", "solitude", "revenge",
]


@dataclass(frozen=True)
class Template:
    """One question/answer pattern; ``keys`` are the facts that perturbation replaces."""

    question: str
    paraphrased_question: str
    answer: str
    paraphrased_answer: str
    keys: tuple[str, ...]


TEMPLATES = [
    Template("What is the full name of the {genre} author born in {city}, {country} on {date}?",
             "Which {genre} writer was born on {date} in {city}, {country}?",
             "The {genre} author born in {city}, {country} on {date} is {name}.",
             "That writer, born on {date} in {city}, is {name}.", ("name",)),
    Template("Where was {name} born?", "What is the birthplace of {name}?",
             "{name} was born in {city}, {country}.",
             "The birthplace of {name} is the city of {city} in {country}.", ("place",)),
    Template("When was {name} born?", "What is the date of birth of {name}?",
             "{name} was born on {date}.", "The birth date of {name} is {date}.", ("date",)),
    Template("What genre does {name} write in?", "Which genre is {name} known for?",
             "{name} is best known for writing {genre}.",
             "Most of the books by {name} belong to the genre of {genre}.", ("genre",)),
    Template("What did the parents of {name} do for a living?",
             "What were the occupations of the mother and father of {name}?",
             "The father of {name} worked as a {father}, and {pos} mother was a {mother}.",
             "{name} grew up with a {father} for a father and a {mother} for a mother.",
             ("father", "mother")),
    Template("Has {name} won any awards?", "Which literary award has {name} received?",
             "Yes, {name} received {award} for {pos} work.",
             "{name} was honored with {award}.", ("award",)),
    Template("Can you name a book written by {name}?", "What is one of the books by {name}?",
             "One of the books written by {name} is titled \"{book1}\".",
             "{name} is the author of a book called \"{book1}\".", ("book1",)),
    Template("Besides \"{book1}\", what is another book by {name}?",
             "Which other book did {name} write, apart from \"{book1}\"?",
             "Besides \"{book1}\", {name} also wrote \"{book2}\".",
             "Another book by {name} is \"{book2}\".", ("book2",)),
    Template("What themes does {name} explore in {pos} writing?",
             "Which themes recur in the books of {name}?",
             "The writing of {name} often explores {theme1} and {theme2}.",
             "Themes of {theme1} and {theme2} run through the books of {name}.", ("theme1", "theme2")),
    Template("How did the upbringing of {name} shape {pos} books?",
             "In what way did the childhood of {name} influence {pos} writing?",
             "Growing up in {city} as the child of a {father} gave {name} a lifelong interest in {theme1}.",
             "A childhood in {city} with a {father} as a father left {name} fascinated by {theme1}.",
             ("city", "father", "theme1")),
]
assert len(TEMPLATES) == QA_PER_AUTHOR


def _make_authors(rng: random.Random, n: int) -> list[dict]:
    names = [(first, last) for first in FIRST_NAMES for last in LAST_NAMES]
    rng.shuffle(names)
    titles = [f"The {a} {b}" for a in TITLE_ADJECTIVES for b in TITLE_NOUNS]
    rng.shuffle(titles)
    authors = []
    for i in range(n):
        city, country = rng.choice(PLACES)
        theme1, theme2 = rng.sample(THEMES, 2)
        father, mother = rng.sample(OCCUPATIONS, 2)
        authors.append(dict(
            name=" ".join(names[i]), pos=rng.choice(["his", "her"]), city=city, country=country,
            date=f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1931, 1994)}",
            genre=rng.choice(GENRES), father=father, mother=mother, award=rng.choice(AWARDS),
            book1=titles[2 * i], book2=titles[2 * i + 1], theme1=theme1, theme2=theme2,
        ))
    return authors


def _alternative(rng: random.Random, key: str, facts: dict) -> dict:
    """Facts for ``key`` replaced by a wrong value of the same kind."""
    def pick(pool, current):
        return rng.choice([p for p in pool if p != current])

    if key == "name":
        first, last = facts["name"].split(" ", 1)
        return {"name": f"{pick(FIRST_NAMES, first)} {pick(LAST_NAMES, last)}"}
    if key in ("place", "city"):
        city, country = pick(PLACES, (facts["city"], facts["country"]))
        return {"city": city, "country": country} if key == "place" else {"city": city}
    if key == "date":
        return {"date": f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1931, 1994)}"}
    if key in ("book1", "book2"):
        return {key: f"The {rng.choice(TITLE_ADJECTIVES)} {rng.choice(TITLE_NOUNS)}"}
    pools = {"genre": GENRES, "father": OCCUPATIONS, "mother": OCCUPATIONS, "award": AWARDS,
             "theme1": THEMES, "theme2": THEMES}
    return {key: pick(pools[key], facts[key])}


def _qa_records(rng: random.Random, author: dict) -> list[dict]:
    records = []
    for t in TEMPLATES:
        answer = t.answer.format(**author)
        paraphrased = t.paraphrased_answer.format(**author)
        perturbed: list[str] = []
        while len(perturbed) < N_PERTURBED:
            wrong = dict(author)
            for key in t.keys:
                wrong.update(_alternative(rng, key, author))
            text = t.paraphrased_answer.format(**wrong)
            if text != paraphrased and text not in perturbed:
                perturbed.append(text)
        records.append(dict(
            question=t.question.format(**author), answer=answer,
            paraphrased_answer=paraphrased,
            perturbed_answer=perturbed,
            paraphrased_question=t.paraphrased_question.format(**author),
            author=author["name"],
        ))
    return records


# True facts for the utility sets: (question, answer, three wrong options of the same kind).
REAL_AUTHORS = [
    ("Who wrote the play 'Romeo and Juliet'?", "William Shakespeare", ["Charles Dickens", "Jane Austen", "Mark Twain"]),
    ("Who is the author of 'Pride and Prejudice'?", "Jane Austen",
     ["Charlotte Bronte", "Virginia Woolf", "Agatha Christie"]),
    ("Who wrote the Harry Potter books?", "J.K. Rowling", ["Stephen King", "J.R.R. Tolkien", "Roald Dahl"]),
    ("Who wrote the novel '1984'?", "George Orwell", ["Aldous Huxley", "Ray Bradbury", "H.G. Wells"]),
    ("Who wrote 'The Adventures of Tom Sawyer'?", "Mark Twain", ["Herman Melville", "Jack London", "Edgar Allan Poe"]),
    ("Who is the author of 'War and Peace'?", "Leo Tolstoy", ["Fyodor Dostoevsky", "Anton Chekhov", "Victor Hugo"]),
    ("Who wrote 'A Christmas Carol'?", "Charles Dickens", ["Oscar Wilde", "Lewis Carroll", "Thomas Hardy"]),
    ("Who wrote 'The Old Man and the Sea'?", "Ernest Hemingway",
     ["John Steinbeck", "William Faulkner", "F. Scott Fitzgerald"]),
    ("Who wrote 'Don Quixote'?", "Miguel de Cervantes", ["Gabriel Garcia Marquez", "Dante Alighieri", "Victor Hugo"]),
    ("Who wrote 'Frankenstein'?", "Mary Shelley", ["Bram Stoker", "Emily Bronte", "Jane Austen"]),
    ("Who wrote 'The Hobbit'?", "J.R.R. Tolkien", ["C.S. Lewis", "J.K. Rowling", "George R.R. Martin"]),
    ("Who wrote 'The Great Gatsby'?", "F. Scott Fitzgerald", ["Ernest Hemingway", "Mark Twain", "John Steinbeck"]),
    ("Who is the author of the play 'Hamlet'?", "William Shakespeare",
     ["Christopher Marlowe", "Oscar Wilde", "Geoffrey Chaucer"]),
    ("Who wrote 'Oliver Twist'?", "Charles Dickens", ["Thomas Hardy", "George Eliot", "Jane Austen"]),
    ("Who wrote 'Crime and Punishment'?", "Fyodor Dostoevsky", ["Leo Tolstoy", "Nikolai Gogol", "Alexander Pushkin"]),
    ("Who wrote 'Alice's Adventures in Wonderland'?", "Lewis Carroll", ["Roald Dahl", "Beatrix Potter", "A.A. Milne"]),
    ("Who wrote 'Les Miserables'?", "Victor Hugo", ["Alexandre Dumas", "Gustave Flaubert", "Jules Verne"]),
    ("Who wrote 'To Kill a Mockingbird'?", "Harper Lee", ["Toni Morrison", "Maya Angelou", "John Steinbeck"]),
    ("Who wrote 'On the Origin of Species'?", "Charles Darwin", ["Isaac Newton", "Albert Einstein", "Gregor Mendel"]),
    ("Who wrote the novel 'Dracula'?", "Bram Stoker", ["Mary Shelley", "Edgar Allan Poe", "H.P. Lovecraft"]),
    ("Who wrote 'Moby-Dick'?", "Herman Melville", ["Nathaniel Hawthorne", "Mark Twain", "Jack London"]),
    ("Who created the detective Sherlock Holmes?", "Arthur Conan Doyle",
     ["Agatha Christie", "Edgar Allan Poe", "Raymond Chandler"]),
    ("Who wrote 'The Chronicles of Narnia'?", "C.S. Lewis", ["J.R.R. Tolkien", "Philip Pullman", "Roald Dahl"]),
    ("Who wrote 'Animal Farm'?", "George Orwell", ["Aldous Huxley", "William Golding", "Kurt Vonnegut"]),
    ("Who wrote 'Murder on the Orient Express'?", "Agatha Christie",
     ["Arthur Conan Doyle", "Dorothy L. Sayers", "Raymond Chandler"]),
    ("Who wrote the poem 'The Raven'?", "Edgar Allan Poe", ["Walt Whitman", "Robert Frost", "Emily Dickinson"]),
    ("Who wrote 'Jane Eyre'?", "Charlotte Bronte", ["Emily Bronte", "Jane Austen", "Mary Shelley"]),
    ("Who wrote 'The Little Prince'?", "Antoine de Saint-Exupery", ["Albert Camus", "Jules Verne", "Victor Hugo"]),
    ("Who wrote 'The Odyssey'?", "Homer", ["Virgil", "Sophocles", "Plato"]),
    ("Who wrote 'The Divine Comedy'?", "Dante Alighieri", ["Giovanni Boccaccio", "Petrarch", "Niccolo Machiavelli"]),
]
WORLD_FACTS = [
    ("What is the capital of France?", "Paris", ["Lyon", "Marseille", "Nice"]),
    ("What is the capital of Japan?", "Tokyo", ["Osaka", "Kyoto", "Seoul"]),
    ("What is the capital of Italy?", "Rome", ["Milan", "Venice", "Naples"]),
    ("What is the capital of Germany?", "Berlin", ["Munich", "Hamburg", "Vienna"]),
    ("What is the capital of Spain?", "Madrid", ["Barcelona", "Seville", "Lisbon"]),
    ("What is the capital of the United Kingdom?", "London", ["Manchester", "Edinburgh", "Dublin"]),
    ("What is the capital of Russia?", "Moscow", ["Saint Petersburg", "Kiev", "Warsaw"]),
    ("What is the capital of Egypt?", "Cairo", ["Alexandria", "Giza", "Luxor"]),
    ("What is the capital of China?", "Beijing", ["Shanghai", "Hong Kong", "Tokyo"]),
    ("What is the largest planet in our solar system?", "Jupiter", ["Saturn", "Earth", "Neptune"]),
    ("Which planet is known as the Red Planet?", "Mars", ["Venus", "Jupiter", "Mercury"]),
    ("What is the chemical formula of water?", "H2O", ["CO2", "NaCl", "O2"]),
    ("What is the chemical symbol for gold?", "Au", ["Ag", "Fe", "Gd"]),
    ("How many continents are there on Earth?", "Seven", ["Five", "Six", "Nine"]),
    ("What is the largest ocean on Earth?", "The Pacific Ocean",
     ["The Atlantic Ocean", "The Indian Ocean", "The Arctic Ocean"]),
    ("What is the tallest mountain in the world?", "Mount Everest", ["K2", "Mont Blanc", "Kilimanjaro"]),
    ("What is the longest river in Africa?", "The Nile", ["The Congo", "The Niger", "The Zambezi"]),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", ["Michelangelo", "Pablo Picasso", "Vincent van Gogh"]),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong", ["Buzz Aldrin", "Yuri Gagarin", "John Glenn"]),
    ("How many days are there in a week?", "Seven", ["Five", "Six", "Eight"]),
    ("At what temperature in degrees Celsius does water boil at sea level?", "100 degrees Celsius",
     ["50 degrees Celsius", "80 degrees Celsius", "212 degrees Celsius"]),
    ("Which gas do plants absorb from the air for photosynthesis?", "Carbon dioxide", ["Oxygen", "Nitrogen", "Helium"]),
    ("What is the currency of Japan?", "The yen", ["The won", "The yuan", "The dollar"]),
    ("What is the largest mammal on Earth?", "The blue whale",
     ["The elephant", "The giraffe", "The great white shark"]),
    ("What language is mainly spoken in Brazil?", "Portuguese", ["Spanish", "French", "English"]),
    ("How many legs does a spider have?", "Eight", ["Six", "Ten", "Four"]),
    ("Who developed the theory of relativity?", "Albert Einstein", ["Isaac Newton", "Niels Bohr", "Galileo Galilei"]),
    ("Who discovered penicillin?", "Alexander Fleming", ["Louis Pasteur", "Marie Curie", "Robert Koch"]),
    ("What is the closest star to the Earth?", "The Sun", ["Sirius", "Polaris", "Alpha Centauri"]),
    ("What is the freezing point of water in degrees Celsius?", "0 degrees Celsius",
     ["10 degrees Celsius", "32 degrees Celsius", "-10 degrees Celsius"]),
]


def _option_sets(rng: random.Random, facts: list) -> tuple[list[dict], list[dict]]:
    plain, perturbed = [], []
    for question, answer, wrong in facts:
        options = [answer, *wrong]
        rng.shuffle(options)
        plain.append({"question": question, "answer": answer,
                      **{f"option{i + 1}": o for i, o in enumerate(options)}})
        perturbed.append({"question": question, "answer": answer, "perturbed_answer": list(wrong)})
    return plain, perturbed


def n_forget_authors(percent: int, n_authors: int = N_AUTHORS) -> int:
    """Authors in forgetXX: ``percent`` % of the authors, at least one."""
    return max(1, round(n_authors * percent / 100))


def generate(seed: int = SEED) -> dict[str, list[dict]]:
    """Every TOFU config of the synthetic data set, from one seed.

    Returns:
        ``{config_name: records}`` for ``full``, ``forgetXX``, ``retainXX``, ``holdoutXX``, their
        ``_perturbed`` versions, 4-option ``forgetXX_mc`` and ``retain_mc``, ``real_authors(_perturbed)``
        and ``world_facts(_perturbed)``.
    """
    rng = random.Random(seed)
    authors = _make_authors(rng, N_AUTHORS + N_HOLDOUT_AUTHORS)
    per_author = [_qa_records(rng, a) for a in authors]
    full_authors, holdout_authors = per_author[:N_AUTHORS], per_author[N_AUTHORS:]

    def plain(recs):
        return [{"question": r["question"], "answer": r["answer"]} for r in recs]

    def perturbed(recs):
        return [{k: r[k] for k in ("question", "answer", "paraphrased_answer", "perturbed_answer",
                                   "paraphrased_question")} for r in recs]

    def flat(groups):
        return [r for g in groups for r in g]

    out: dict[str, list[dict]] = {"full": plain(flat(full_authors))}
    for pct in FORGET_PERCENTS:
        k = n_forget_authors(pct)
        forget = flat(full_authors[N_AUTHORS - k:])
        out[f"forget{pct:02d}"] = plain(forget)
        out[f"forget{pct:02d}_perturbed"] = perturbed(forget)
        out[f"retain{100 - pct:02d}"] = plain(flat(full_authors[:N_AUTHORS - k]))
        out[f"holdout{pct:02d}"] = plain(flat(holdout_authors[:min(k, N_HOLDOUT_AUTHORS)]))
    out["retain_perturbed"] = perturbed(flat(full_authors[:N_RETAIN_PERTURBED_AUTHORS]))
    # 4-option items for the multiple-choice path (their own seed: the files above do not change)
    for name in [f"forget{pct:02d}" for pct in FORGET_PERCENTS] + ["retain"]:
        out[f"{name}_mc"] = mc_from_perturbed(out[f"{name}_perturbed"])
    out["real_authors"], out["real_authors_perturbed"] = _option_sets(rng, REAL_AUTHORS)
    out["world_facts"], out["world_facts_perturbed"] = _option_sets(rng, WORLD_FACTS)
    out["authors"] = [{k: v for k, v in a.items()} for a in authors]  # profiles, for reference
    return out


def to_json(records: list[dict]) -> str:
    """The exact text a config file is written with (stable, so regeneration is byte-identical)."""
    return json.dumps(records, indent=1, ensure_ascii=False) + "\n"


def write(folder: str | Path = paths.SYNTHETIC_DIR, seed: int = SEED) -> list[Path]:
    """Write every config as ``<config>.json`` under ``folder``; returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, records in generate(seed).items():
        file = folder / f"{name}.json"
        file.write_text(to_json(records))
        written.append(file)
    return written


if __name__ == "__main__":
    for f in write():
        print(f)
