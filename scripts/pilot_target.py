"""Pilot behind the smol target's prompt and epochs (issue 27, docs/choices.md): the target's
forget ES after each epoch from 3 on, then its full evaluation, with the smol settings of
papermill_runs/params/smol/02_target_and_gold.yaml (but random batches, as before issue 27).
Not a record: a /tmp run while choosing, about 20 minutes on 2 cores. Usage:
    python scripts/pilot_target.py openunlearning|model [OUT.json]
"""
import json
import sys
import tempfile
import time

from transformers import TrainerCallback

from frag_utils import metrics, models, prompts, records, train
from frag_utils.data import load_split


def main() -> None:
    template = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else f"/tmp/pilot_target_{template}.json"
    prompts.set_template(template)
    cfg = train.TrainConfig(epochs=8.0, lr=2e-4, batch_size=16, grad_accum=1, warmup_epochs=0.5,
                            scheduler="constant_with_warmup", weight_decay=0.01, seed=42, device="cpu")
    rows: list[dict] = []
    start = time.time()
    records.seed_everything(42)
    model, tok = models.load_model(models.SMOLLM2, seed=42)

    class ForgetES(TrainerCallback):
        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            if round(state.epoch) >= 3:
                model.eval()
                es = metrics.es_on_source(model, tok, "synthetic", "forget10")
                model.train()
                rows.append({"epoch": round(state.epoch), "es": es["es"], "es_retain": es["es_retain"],
                             "elapsed_s": time.time() - start})
                print(rows[-1], flush=True)

    dataset = train.QADataset(tok, load_split("synthetic", "full"), True, 256)
    trainer = train.make_trainer(model, tok, dataset, cfg, tempfile.mkdtemp(prefix="pilot_"), callbacks=[ForgetES()])
    trainer.train()
    final = metrics.evaluate_on_source(model.eval(), tok, "synthetic", "forget10", max_new_tokens=48)
    result = {"template": template, "by_epoch": rows, "train_seconds": time.time() - start,
              "final": {k: v for k, v in final.items() if not isinstance(v, dict)}}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(result["final"])


if __name__ == "__main__":
    main()
