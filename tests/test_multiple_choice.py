import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from lm_eval.api.model import LM

from frag_utils import data, models
from frag_utils import multiple_choice as MC
from frag_utils.data import DataError

FIXTURES = Path(__file__).parent / "fixtures"


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


# ---- the items -------------------------------------------------------------------------------

@pytest.mark.parametrize("config, base", [("forget10_mc", "forget10_perturbed"), ("retain_mc", "retain_perturbed")])
def test_mc_items_hold_the_paraphrase_among_three_perturbed_answers(config, base):
    items, source = data.load_split("synthetic", config), data.load_split("synthetic", base)
    assert [i["question"] for i in items] == [s["question"] for s in source]
    positions = Counter()
    for item, src in zip(items, source):
        options = [item[f"option{k}"] for k in range(1, 5)]
        assert item["answer"] == src["paraphrased_answer"] and options.count(item["answer"]) == 1
        assert sorted(o for o in options if o != item["answer"]) == sorted(src["perturbed_answer"][:3])
        positions[options.index(item["answer"])] += 1
    assert len(positions) == 4  # the right answer is not always in one place


def test_sources_without_mc_configs_derive_the_same_items(tmp_path):
    for name in ("forget10_perturbed", "retain_perturbed"):
        shutil.copy(data.paths.SYNTHETIC_DIR / f"{name}.json", tmp_path)
    assert data.load_split(str(tmp_path), "forget10_mc") == data.load_split("synthetic", "forget10_mc")
    assert data.load_split(str(tmp_path), "retain_mc", limit=3) == data.load_split("synthetic", "retain_mc")[:3]


def test_items_that_cannot_have_four_options_are_refused():
    rec = {"question": "q", "answer": "a", "paraphrased_answer": "p", "perturbed_answer": ["x", "y"]}
    with pytest.raises(DataError, match="three distinct perturbed"):
        data.mc_from_perturbed([rec])
    with pytest.raises(DataError, match="three distinct perturbed"):
        data.mc_from_perturbed([{**rec, "perturbed_answer": ["x", "y", "p"]}])


# ---- scoring through lm-eval -------------------------------------------------------------------

class _Oracle(LM):
    """Log-likelihood 0 for the option it picks, -5 for the others; picks the right answer (or,
    with ``wrong=True``, the first option that is not)."""

    def __init__(self, items, wrong=False):
        super().__init__()
        self.items = {i["question"]: i for i in items}
        self.wrong = wrong

    def _pick(self, context):
        question = re.findall(r"Question: (.*)\nAnswer:", context)[-1]  # the last one: after any shots
        item = self.items[question]
        if not self.wrong:
            return item["answer"]
        return next(item[f"option{k}"] for k in range(1, 5) if item[f"option{k}"] != item["answer"])

    def loglikelihood(self, requests):
        out = []
        for r in requests:
            context, continuation = r.args
            chosen = continuation.strip() == self._pick(context)
            out.append((0.0 if chosen else -5.0, chosen))
        return out

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError

    def generate_until(self, requests):
        raise NotImplementedError


def _all_items():
    names = MC.local_sets("forget10")
    return [i for n in names.values() for i in data.load_split("synthetic", n)]


def test_task_definition_loads_offline_and_scores_a_right_model_as_right():
    for shots in (0, 2):
        res = MC.evaluate_local(_Oracle(_all_items()), forget_split="forget10", num_fewshot=shots)
        assert res["acc"] == {"forget": 1.0, "retain": 1.0, "real_authors": 1.0, "world_facts": 1.0}, shots
        assert res["utility_acc"] == 1.0 and res["n"] == {"forget": 30, "retain": 40, "real_authors": 30,
                                                          "world_facts": 30}
    wrong = MC.evaluate_local(_Oracle(_all_items(), wrong=True), forget_split="forget10", limit=10)
    assert set(wrong["acc"].values()) == {0.0} and all(len(v) == 10 for v in wrong["per_example"].values())


def test_a_random_model_scores_chance_on_shuffled_options(tokenizer):
    model = models.build_tiny_model(len(tokenizer), seed=3).eval()
    res = MC.evaluate_local(model, tokenizer, forget_split="forget10", batch_size=16)
    hits = [h for v in res["per_example"].values() for h in v]
    assert len(hits) == 130 and set(hits) <= {0.0, 1.0}
    # 130 four-option items: a 99.9 % binomial interval around chance (0.25) is about [0.12, 0.38]
    assert 0.12 < sum(hits) / len(hits) < 0.38, res["acc"]


def test_unknown_sets_and_missing_tokenizer_are_refused(tokenizer):
    with pytest.raises(MC.MCError, match="Unknown multiple-choice set"):
        MC.evaluate_local(_Oracle([]), sets=("forget", "mmlu"))
    with pytest.raises(MC.MCError, match="tokenizer"):
        MC.evaluate_local(models.build_tiny_model(len(tokenizer), seed=0), None)
    with pytest.raises(DataError, match="not a forget split"):
        MC.local_sets("retain90")


def test_hub_task_settings_are_the_papers():
    assert MC.hub_task_settings() == {"wmdp_cyber": {"num_fewshot": 0, "role": "forget"},
                                      "mmlu": {"num_fewshot": 5, "role": "utility"}}


# ---- MUSE --------------------------------------------------------------------------------------

def test_muse_loader_reads_its_fixture():
    root = str(FIXTURES / "muse_news")
    qa = data.load_muse(root, "knowmem", "forget_qa")
    assert qa[0] == {"question": "Who is the mayor of Lowmere?", "answer": "Ada Quill"} and len(qa) == 2
    assert data.load_muse(root, "knowmem", "retain_qa", limit=1) == [
        {"question": "Where did a new bakery open?", "answer": "Fernby's market square"}]
    assert set(data.load_muse(root, "verbmem", "forget")[0]) == {"prompt", "gt"}
    for split in ("forget", "retain1", "retain2", "holdout"):
        assert all("text" in r for r in data.load_muse(root, "raw", split))


def test_muse_loader_names_what_is_wrong(tmp_path):
    root = str(FIXTURES / "muse_news")
    with pytest.raises(DataError, match="no split 'retain'"):
        data.load_muse(root, "knowmem", "retain")
    with pytest.raises(DataError, match="Unknown MUSE subset"):
        data.load_muse(root, "books", "forget")
    (tmp_path / "knowmem").mkdir()
    (tmp_path / "knowmem" / "forget_qa.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(DataError, match=r"missing field\(s\) \['answer'\]"):
        data.load_muse(str(tmp_path), "knowmem", "forget_qa")
    with pytest.raises(DataError, match="expected the file"):
        data.load_muse(str(tmp_path), "knowmem", "retain_qa")
