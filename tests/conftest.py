"""Shared fixtures: the SmolLM2 tokenizer, the tiny model, and a tiny model trained to get some
answers partly right (so metrics have something non-trivial to measure)."""
import os

os.environ.setdefault("FRAG_PROGRESS", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

from frag_utils import data, models, paths, train  # noqa: E402

# every cache a test makes empty (make verify's, the runner's, the dry run's) shares the embedded model's
# converted copy with the session's cache, in this process and the kernels and jobs it starts
os.environ.setdefault(paths.MODELS_DIR_ENV, str(paths.models_dir()))


# Modules whose module-scoped fixture is costly (the paper profile's dry run: about 80 s on a Zen 4; the toy targets of
# every unlearning method and of the attacks): their tests go to one xdist worker, so it is made once. xdist's
# own `--dist loadgroup` does this by marks, but with pytest 9.2 it silently stops grouping
# (pytest-dev/pytest-xdist#1386): the scheduler below groups by module name instead.
ONE_WORKER_MODULES = ("test_dryrun.py", "test_unlearn.py", "test_attacks.py")


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: without it installed, pytest runs as ever
def pytest_xdist_make_scheduler(config, log):
    """``-n`` with the default ``--dist load``: each test alone, except those of ``ONE_WORKER_MODULES``."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.rsplit("/", 1)[-1] in ONE_WORKER_MODULES else nodeid

        def remove_node(self, node):
            """As loadscope's, except that the test that crashed its worker is reported failed and not run
            again (as ``--dist load`` does): only the rest of its unit goes back to the queue."""
            workload = self.assigned_work.pop(node)
            pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items()
                       if not done]
            if not pending:
                return None
            scope, crashed = pending[0]
            workload[scope][crashed] = True
            self.workqueue.update({k: unit for k, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

    return Scheduling(config, log)


def native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX) and torch dispatches to those
    kernels. Elsewhere (an AVX2-only CPU such as AMD Zen 3, or kernels capped at AVX2) torch emulates
    bf16 matrix products, more than a hundred times slower on a model the size of SmolLM2."""
    from frag_utils.records import cpu_description

    flags = set(cpu_description().get("cpu_flags", []))
    return bool(flags & {"avx512_bf16", "amx_bf16"}) and torch.backends.cpu.get_cpu_capability() != "AVX2"


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): the
    tiny model's matrices are too small to split, and on a busy 2-core machine two threads wait
    on each other at every operation (about 50x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer():
    return models.load_tokenizer(models.SMOLLM2)


@pytest.fixture()
def tiny(tokenizer):
    return models.build_tiny_model(len(tokenizer), seed=0).eval()


@pytest.fixture(scope="session")
def qa_records():
    """Eight forget questions with their perturbed answers."""
    return data.load_split("synthetic", "forget10_perturbed", limit=8)


@pytest.fixture(scope="session")
def partly_trained(tokenizer, qa_records, tmp_path_factory):
    """The tiny model after a short fine-tune on ``qa_records``: some answers right, some partly."""
    model = models.build_tiny_model(len(tokenizer), seed=1)
    cfg = train.TrainConfig(epochs=30, lr=3e-3, batch_size=8, grad_accum=1, warmup_epochs=0,
                            scheduler="constant", bf16=False, seed=0)
    train.finetune(model, tokenizer, qa_records, cfg, tmp_path_factory.mktemp("partly"))
    return model.eval()


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
