"""A fake papermill for the runner's tests: it writes what the real notebooks 02, 05 and 06 write
(the executed notebook, first to the temporary file; results.json; the checkpoints 02 and 05 cache)
in a few milliseconds, and the models of notebook 02 a remake makes alone (``runs.train_models``).
Its state lives in files, so that the jobs Snakemake starts in other processes share it
(``fake_site/sitecustomize.py`` installs it there).

State (a JSON file): ``kill_at`` kills the n-th execution midway (its temporary notebook written,
a torn trainer checkpoint left in a 05 run's work folder, no record); ``fail_at`` makes it fail
with an error in a cell; ``target_es`` is what notebook 02's training comes out at. Each
execution appends ``<notebook>/<run>`` to the calls file beside it.
"""
import hashlib
import json
import os
from pathlib import Path

from frag_utils import cache, paths
from frag_utils import parameters as P

STATE_ENV = "FRAG_FAKE_PAPERMILL"  # the state file; set, a new Python process installs the fake


class Killed(BaseException):
    """A kill in the middle of a notebook (not an Exception: nothing may catch it)."""


class State:
    """The fake's state, read and written through its file; ``calls`` is the list of executions."""

    def __init__(self, file: Path):
        self.file, self.calls_file = Path(file), Path(f"{file}.calls")
        if not self.file.exists():
            self.file.write_text(json.dumps({"kill_at": None, "fail_at": None, "target_es": 0.9}))
            self.calls_file.write_text("")

    def __getitem__(self, key):
        if key == "calls":
            return self.calls_file.read_text().split()
        return json.loads(self.file.read_text()).get(key)

    def __setitem__(self, key, value):
        self.update(**{key: value})

    def update(self, **values):
        if "calls" in values:
            self.calls_file.write_text("".join(f"{c}\n" for c in values.pop("calls")))
        self.file.write_text(json.dumps({**json.loads(self.file.read_text()), **values}))


def sha(folder) -> str:
    return hashlib.sha256((Path(folder) / "model.safetensors").read_bytes()).hexdigest()


def fake_checkpoint(folder, settings, inputs, weights):
    """A checkpoint as the notebooks cache one (:func:`cache.checkpoint`), its weights a text."""
    def make(folder, work):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_text(weights)
        return {}

    cache.checkpoint(folder, "fake", settings, inputs, make)


def install(state: State):
    """Replace ``papermill.execute_notebook`` with the fake (returns the fake)."""
    import papermill

    def fake(input_path, output_path, parameters, **_):
        import warnings

        from papermill.exceptions import PapermillExecutionError

        with warnings.catch_warnings():  # the check papermill makes where it writes the notebook
            warnings.simplefilter("error")
            papermill.iorw.papermill_io.get_handler(output_path, extensions=[".ipynb", ".json"])
        nb = input_path.rsplit("/", 1)[-1].removesuffix(".ipynb")
        # as the notebook's parameters cell does: its defaults, then what papermill injects
        parameters = P.notebook_defaults(input_path) | parameters
        with open(state.calls_file, "a") as f:
            f.write(f"{nb}/{parameters['run_name']}\n")
        n = len(state["calls"])
        out = paths.RUNS_DIR / nb / parameters["run_name"]
        with open(output_path, "w") as f:
            json.dump({"partial": True}, f)
        ckpt = paths.checkpoint_dir("t", f"unlearned/{parameters['run_name']}")
        work = ckpt.with_name(f"{ckpt.name}.work")
        torn = [c for c in work.glob("checkpoint-*") if not (c / "trainer_state.json").is_file()]
        assert not torn, f"{nb} started beside a torn checkpoint {torn}"
        if n == state["kill_at"]:
            if nb == "05_unlearn":  # killed while the Trainer was writing a checkpoint
                (work / "checkpoint-2").mkdir(parents=True, exist_ok=True)
                (work / "checkpoint-2" / "model.safetensors").write_text("half")
            raise Killed()
        if n == state["fail_at"]:  # an error in a cell, as papermill reports it
            raise PapermillExecutionError(cell_index=5, exec_count=3, source="x", ename="FileNotFoundError",
                                          evalue="The checkpoint of 05_unlearn/x is not in the cache.\nRun it.",
                                          traceback=[])
        results = {"n": len(parameters["run_name"])}
        if nb == "02_target_and_gold":  # the weights follow from the training's outcome (target_es)
            for role in ("target", "gold_forget10"):
                fake_checkpoint(paths.checkpoint_dir("t", role), {"role": role}, {}, f"{role} {state['target_es']}")
            roles = {"target": "target", "gold": "gold_forget10"}  # as notebook 02 names them
            results["checkpoints"] = {k: str(paths.checkpoint_dir("t", r)) for k, r in roles.items()}
            results["checkpoint_sha256"] = {k: sha(paths.checkpoint_dir("t", r)) for k, r in roles.items()}
            results["evaluation"] = {"target": {"es": state["target_es"]}}
        if nb == "05_unlearn":
            target_dir = paths.checkpoint_dir("t", "target")
            assert (target_dir / "model.safetensors").is_file(), "05 ran without its target"
            target = (target_dir / "model.safetensors").read_text()
            if parameters["method"] == "gold":  # points to notebook 02's gold model
                ckpt = paths.checkpoint_dir("t", "gold_forget10")
            else:  # unlearned from the target it read, reused when cached under the same key
                ckpt = paths.checkpoint_dir("t", f"unlearned/{parameters['run_name']}")
                fake_checkpoint(ckpt, {"method": parameters["method"]}, {"original": str(target_dir)},
                                f"{parameters['method']} of {target}")
            results.update(method=parameters["method"], unlearned=str(ckpt), evaluated_on=target, checkpoint_sha256={
                "original": sha(target_dir), "unlearned": sha(ckpt)})
        if nb == "06_attacks":  # as notebook 06 reads the record of the model it attacks
            from frag_utils import records  # imports torch: only where a record is read

            source = records.read_run("05_unlearn", parameters["unlearned_run"])
            unlearned = source["results"]["unlearned"]
            assert (Path(unlearned) / "model.safetensors").is_file(), "06 ran without its checkpoint"
            results["checkpoint_sha256"] = {"attacked": sha(unlearned)}
            results["before"] = (Path(unlearned) / "model.safetensors").read_text()
        out = Path(os.environ.get(paths.RECORD_TO_ENV) or out)  # as paths.run_dir does
        (out / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": parameters}, "results": results}))
        with open(output_path, "w") as f:
            json.dump({"executed": parameters["run_name"]}, f)

    def fake_train_models(params, roles):  # runs.train_models: notebook 02's models without the notebook
        with open(state.calls_file, "a") as f:
            f.write(f"02_target_and_gold/{params['run_name']}@{'+'.join(roles)}\n")
        made = {}
        for role in roles:
            name = {"target": "target", "gold": "gold_forget10"}[role]
            fake_checkpoint(paths.checkpoint_dir("t", name), {"role": name}, {}, f"{name} {state['target_es']}")
            made[role] = sha(paths.checkpoint_dir("t", name))
        return made

    from frag_utils import runs

    papermill.execute_notebook = fake
    runs.train_models = fake_train_models
    return fake
