"""Caches that know the code: every cached artefact (a trained checkpoint, an evaluation, the
calibration norms) is made again when the package's source changes, and reused otherwise."""
import shutil

import pytest

from frag_utils import cache, calibration, data, metrics, models, paths, train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def counted(monkeypatch, tmp_path):
    """A fresh cache, and a count of the calls that make each artefact."""
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    calls = {"train": 0, "evaluate": 0, "calibrate": 0}
    finetune, evaluate, norms = train.finetune, metrics.model_utility, calibration.activation_norms

    def count(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(train, "finetune", count("train", finetune))
    monkeypatch.setattr(metrics, "model_utility", count("evaluate", evaluate))
    monkeypatch.setattr(calibration, "activation_norms", count("calibrate", norms))
    return calls


def _make_all(tmp_path, records, tokenizer):
    """Train a tiny checkpoint, evaluate it and calibrate on it, each through its cache."""
    cfg = train.TrainConfig(epochs=1, lr=1e-3, batch_size=4, grad_accum=1, warmup_epochs=0, seed=0)
    folder = tmp_path / "ckpt"
    made = train.train_or_reuse("tiny", records, cfg, folder, {"split": "forget10"})
    metrics.evaluate_model_cached(str(folder), "synthetic", "forget10", limit=1, max_new_tokens=2, batch_size=4)
    model, tok = models.load_model(str(folder))
    modules = calibration.select_modules(model, "mlp")
    calibration.calibrate(model, tok, str(folder), "synthetic", "forget10", records, modules,
                          calibration.CalibConfig(n=2, max_len=32))
    return folder, made


def test_an_edit_of_the_package_source_remakes_the_checkpoint_the_evaluation_and_the_norms(
        counted, tmp_path, tokenizer, monkeypatch):
    records = data.load_split("synthetic", "forget10", 4)
    folder, made = _make_all(tmp_path, records, tokenizer)
    assert counted == {"train": 1, "evaluate": 1, "calibrate": 1} and not made["reused"]
    assert cache.is_current(folder)
    _, made = _make_all(tmp_path, records, tokenizer)  # the same code: everything from the cache
    assert counted == {"train": 1, "evaluate": 1, "calibrate": 1} and made["reused"]
    # an equation edited: the hash of the package's source changes, and so every key
    monkeypatch.setattr(cache, "source_hash", lambda: "edited")
    assert not cache.is_current(folder)
    _, made = _make_all(tmp_path, records, tokenizer)
    assert counted == {"train": 2, "evaluate": 2, "calibrate": 2} and not made["reused"]
    assert cache.is_current(folder)


def _append(text):
    return lambda f: f.write_text((f.read_text() if f.is_file() else "") + text)


# (file of a copy of the package, the edit, whether the hash must move)
HASH_EDITS = [("report/tables.py", _append("\n# a table changed\n"), False),
              ("report/new_table.py", _append("TABLE = 1\n"), False),  # anything under the reporting layer
              ("runs.py", _append("\n# the runner changed\n"), False),
              ("unlearn.py", lambda f: f.write_text(f.read_text().replace("def npo_loss(", "def npo_loss( ", 1)),
               True),
              ("new_loss.py", _append("LOSS = 1\n"), True)]  # a new top-level module counts


@pytest.mark.parametrize("file,edit,moves", HASH_EDITS, ids=[e[0] for e in HASH_EDITS])
def test_the_source_hash_sees_an_edited_loss_and_not_an_edited_table(tmp_path, monkeypatch, file, edit, moves):
    copy = tmp_path / "frag_utils"
    shutil.copytree(paths.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    cache.source_hash.cache_clear()
    monkeypatch.setattr(paths, "PACKAGE_DIR", copy)
    try:
        before = cache.source_hash()
        edit(copy / file)
        cache.source_hash.cache_clear()
        assert (cache.source_hash() != before) == moves
    finally:
        cache.source_hash.cache_clear()


def test_no_computing_module_imports_one_left_out_of_the_source_hash():
    """A module left out of the hash must not decide a cached number: no module inside the hash
    imports it (else an edit of it would change a result and keep the stale cache)."""
    outside = cache.NOT_COMPUTING | {cache.REPORTING}
    graph = _package_imports()
    for module, imported in graph.items():
        if module not in outside:
            assert not imported & outside, (module, sorted(imported & outside))
    assert graph[cache.REPORTING] >= {"paths", "records", "runs"}  # the subpackage's own imports are seen
    assert {f.stem for f in paths.PACKAGE_DIR.glob("*.py")} >= cache.NOT_COMPUTING  # no stale names



def test_the_package_modules_import_one_another_without_a_circle():
    """Every import counts, those inside functions too: a circle works only while each side defers
    its import, and breaks on the first one moved to the top (models -> frag -> calibration ->
    cache -> models was one)."""
    import graphlib

    graph = _package_imports()
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")
    assert set(order) >= set(graph)


def _package_imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in its source; the reporting subpackage
    (``report``, every file of it) is one module."""
    import ast

    stems = {f.stem for f in paths.PACKAGE_DIR.glob("*.py")} | {cache.REPORTING}
    graph: dict[str, set[str]] = {}
    files = [(f.stem, f, 1) for f in sorted(paths.PACKAGE_DIR.glob("*.py"))]
    files += [(cache.REPORTING, f, 2) for f in sorted((paths.PACKAGE_DIR / cache.REPORTING).glob("*.py"))]
    for name, f, top in files:  # top: the relative level that names the package itself
        imported = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level == top or (node.module or "").startswith("frag_utils")):
                inside = (node.module or "").removeprefix("frag_utils").lstrip(".") if node.level != 1 or top == 1 \
                    else ""
                imported |= {inside.split(".")[0]} if inside else {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name.split(".")[1] for a in node.names if a.name.startswith("frag_utils.")}
        graph[name] = graph.get(name, set()) | ((imported & stems) - {name})
    return graph


def test_a_checkpoint_made_from_an_input_that_was_made_again_is_not_current(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path))

    def writer(text):
        def make(folder, work):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text("{}")
            (folder / "model.safetensors").write_text(text)
            return {}
        return make

    cache.checkpoint(tmp_path / "target", "target", {"epochs": 1}, {}, writer("t1"))
    cache.checkpoint(tmp_path / "unlearned", "05", {"lr": 1}, {"original": str(tmp_path / "target")}, writer("u"))
    assert cache.is_current(tmp_path / "unlearned")
    cache.checkpoint(tmp_path / "target", "target", {"epochs": 2}, {}, writer("t2"))  # other settings
    assert not cache.is_current(tmp_path / "unlearned")
    made = cache.checkpoint(tmp_path / "unlearned", "05", {"lr": 1}, {"original": str(tmp_path / "target")},
                            writer("u2"))
    assert not made["reused"] and cache.is_current(tmp_path / "unlearned")


def test_a_checkpoint_made_with_other_kernels_is_made_again_not_reused(tmp_path, monkeypatch):
    """A run with the kernels capped at AVX2 computes other bits (forget ES 0.95 against 0.89 for the
    smol target): it must remake what the native run cached, never read it back as its own."""
    import torch

    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path))
    for name in cache.KERNEL_CAPS:
        monkeypatch.delenv(name, raising=False)
    made = []

    def make(folder, work):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text(str(len(made)))
        made.append(dict(cache.kernels()))
        return {}

    def again():
        return cache.checkpoint(tmp_path / "target", "target", {"epochs": 1}, {}, make)

    assert not again()["reused"] and again()["reused"] and len(made) == 1
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN capped
    assert not cache.is_current(tmp_path / "target") and not again()["reused"]
    assert made[-1]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    monkeypatch.setenv("FRAG_THREADS", "3")  # another thread count: within tolerance, reused
    assert cache.is_current(tmp_path / "target") and again()["reused"]
    real = torch.backends.cpu.get_cpu_capability()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: real + "-other")  # ATen's path
    assert not cache.is_current(tmp_path / "target") and not again()["reused"]
    assert again()["reused"] and len(made) == 3
    record = models.load_record(tmp_path / "target")
    assert record["cache"]["kernels"] == {"cpu_capability": real + "-other", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                          "DNNL_MAX_CPU_ISA": "", "MKL_ENABLE_INSTRUCTIONS": "", "MKL_CBWR": ""}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # the same cap in another case: the same kernels
    assert cache.is_current(tmp_path / "target")
    # on a CUDA machine the GPU is the kernel path, whatever the host CPU: a CPU-made artefact is remade
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100")
    assert cache.kernels() == {"gpu": "NVIDIA H100", "cuda": torch.version.cuda}
    assert not cache.is_current(tmp_path / "target")
